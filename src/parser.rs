//! Recursive-descent parser. To be written.
