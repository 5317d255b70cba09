//! Tokens (logos). To be written.
