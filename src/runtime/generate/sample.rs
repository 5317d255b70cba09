//! Picking the next token from a row of logits: greedy, or sampled as `transformers`'
//! `generate(do_sample=True)` does (temperature, then top-k, then top-p, then a draw from
//! the softmax of what is left), reproducibly from a seed.

use crate::runtime::defaults::Rng;

/// How the next token is chosen.
pub enum Sampler {
    /// The largest logit (the first of equal ones, as `argmax` picks).
    Greedy,
    /// A draw from the tempered, truncated distribution.
    Random {
        temperature: f32,
        top_k: Option<usize>,
        top_p: Option<f32>,
        rng: Rng,
    },
}

impl Sampler {
    /// A sampler drawing with `seed`; an error names the setting out of range.
    pub fn random(
        temperature: f32,
        top_k: Option<usize>,
        top_p: Option<f32>,
        seed: u64,
    ) -> Result<Sampler, String> {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(format!(
                "the temperature must be a positive number, not {temperature}"
            ));
        }
        if top_k == Some(0) {
            return Err("top-k must keep at least one token".into());
        }
        if let Some(p) = top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(format!("top-p must be in (0, 1], not {p}"));
        }
        let rng = Rng::stream(seed, "sample", "tokens");
        Ok(Sampler::Random {
            temperature,
            top_k,
            top_p,
            rng,
        })
    }

    /// The id of the next token. `logits` must not be empty.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        match self {
            Sampler::Greedy => argmax(logits),
            Sampler::Random {
                temperature,
                top_k,
                top_p,
                rng,
            } => {
                let kept = candidates(logits, *temperature, *top_k, *top_p);
                draw(&kept, rng.uniform())
            }
        }
    }
}

/// The index of the largest value, the first of equal ones; NaN never wins.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] || values[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The tokens left after temperature, top-k and top-p, largest first, each with its
/// probability (normalized over those left).
fn candidates(logits: &[f32], temperature: f32, top_k: Option<usize>, top_p: Option<f32>) -> Vec<(u32, f64)> {
    let mut order: Vec<(u32, f64)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .map(|(i, &l)| (i as u32, f64::from(l / temperature)))
        .collect();
    if order.is_empty() {
        return vec![(0, 1.0)];
    }
    // Stable: equal logits keep the smaller id first.
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    order.truncate(top_k.unwrap_or(order.len()));
    let top = order[0].1;
    let weights: Vec<f64> = order.iter().map(|&(_, l)| (l - top).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut kept: Vec<(u32, f64)> = order
        .iter()
        .zip(&weights)
        .map(|(&(id, _), &w)| (id, w / total))
        .collect();
    if let Some(p) = top_p {
        // The smallest prefix whose probability reaches `p` (at least one token).
        let mut sum = 0.0;
        let end = kept
            .iter()
            .position(|&(_, q)| {
                sum += q;
                sum >= f64::from(p)
            })
            .map_or(kept.len(), |i| i + 1);
        kept.truncate(end);
        let total: f64 = kept.iter().map(|&(_, q)| q).sum();
        kept.iter_mut().for_each(|(_, q)| *q /= total);
    }
    kept
}

/// The candidate whose cumulative probability first exceeds `u` (in `[0, 1)`).
fn draw(kept: &[(u32, f64)], u: f64) -> u32 {
    let mut sum = 0.0;
    for &(id, q) in kept {
        sum += q;
        if u < sum {
            return id;
        }
    }
    kept.last().map_or(0, |&(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 2.0]), 2);
        assert_eq!(Sampler::Greedy.pick(&[0.0, -1.0, 7.5]), 2);
    }

    #[test]
    fn top_k_and_top_p_keep_the_most_likely() {
        let logits = [0.0, 3.0, 1.0, 2.0];
        let ids = |k: Vec<(u32, f64)>| k.iter().map(|&(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(candidates(&logits, 1.0, Some(2), None)), [1, 3]);
        // Softmax of [3, 2, 1, 0] is [0.644, 0.237, 0.087, 0.032].
        assert_eq!(ids(candidates(&logits, 1.0, None, Some(0.6))), [1]);
        assert_eq!(ids(candidates(&logits, 1.0, None, Some(0.85))), [1, 3]);
        assert_eq!(ids(candidates(&logits, 1.0, None, Some(0.9))), [1, 3, 2]);
        let kept = candidates(&logits, 1.0, Some(3), Some(0.85));
        assert!((kept.iter().map(|&(_, q)| q).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn temperature_flattens_the_distribution() {
        let logits = [2.0, 0.0];
        let sharp = candidates(&logits, 0.5, None, None)[0].1;
        let flat = candidates(&logits, 4.0, None, None)[0].1;
        assert!((sharp - 1.0 / (1.0 + (-4.0f64).exp())).abs() < 1e-9, "{sharp}");
        assert!((flat - 1.0 / (1.0 + (-0.5f64).exp())).abs() < 1e-9, "{flat}");
    }

    #[test]
    fn draws_follow_the_probabilities_and_the_seed() {
        let logits = [0.0, (3.0f32).ln(), f32::NEG_INFINITY];
        let mut sampler = Sampler::random(1.0, None, None, 7).unwrap();
        let picks: Vec<u32> = (0..4000).map(|_| sampler.pick(&logits)).collect();
        let ones = picks.iter().filter(|&&id| id == 1).count() as f64 / 4000.0;
        assert!((ones - 0.75).abs() < 0.03, "{ones}");
        assert!(!picks.contains(&2));
        let mut again = Sampler::random(1.0, None, None, 7).unwrap();
        assert!(picks.iter().all(|&id| id == again.pick(&logits)));
        let mut other = Sampler::random(1.0, None, None, 8).unwrap();
        assert!(picks.iter().any(|&id| id != other.pick(&logits)));
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(Sampler::random(0.0, None, None, 0).is_err());
        assert!(Sampler::random(f32::NAN, None, None, 0).is_err());
        assert!(Sampler::random(1.0, Some(0), None, 0).is_err());
        assert!(Sampler::random(1.0, None, Some(1.5), 0).is_err());
        assert!(Sampler::random(1.0, None, Some(0.0), 0).is_err());
    }
}
