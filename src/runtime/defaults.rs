//! Tensors drawn when no file is given: params as PyTorch's `nn.Linear` initializes them,
//! inputs from a standard normal, masks all ones.
//!
//! The generator is SplitMix64, written here rather than taken from a crate so that a seed
//! gives the same tensors forever, whatever crate versions do. Each tensor has its own
//! stream, derived from the seed and its name, so adding a param changes no other tensor.

use super::tensor::{numel, Tensor};
use crate::ir::{DType, Op, Program, ValueId};

/// SplitMix64 (Steele, Lea and Flood, 2014): one 64-bit state, a Weyl step and a mixer;
/// tiny, fast and statistically good enough for test data.
pub struct Rng(u64);

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// The stream of the tensor `name` (`kind` keeps params and inputs apart) under `seed`.
    pub fn stream(seed: u64, kind: &str, name: &str) -> Rng {
        // FNV-1a over "kind/name", mixed with the seed.
        let text = format!("{kind}/{name}");
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Rng(mix(seed.wrapping_add(GOLDEN)) ^ hash)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by Box–Muller (one value per pair of uniforms, for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1], so the log is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// SplitMix64's output function (a variant of MurmurHash3's finalizer).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Every param of `program`, of the given shapes: uniform in ±1/sqrt(fan_in), as
/// `nn.Linear` draws both its weight and its bias.
pub fn params(program: &Program, shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor> {
    program
        .params
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(i, (decl, shape))| {
            let bound = 1.0 / (fan_in(program, i, shapes) as f64).sqrt();
            let mut rng = Rng::stream(seed, "param", &decl.name);
            fill(shape, || ((2.0 * rng.uniform() - 1.0) * bound) as f32)
        })
        .collect()
}

/// Every input of `program`, of the given shapes: zeros for a state, standard normal, or
/// all ones for an input used only as a mask (keep every position), for a bool input (true
/// everywhere: a mask that keeps every position; a normal draw would not be a bool) and for
/// an int64 input (a mask that keeps every position, ids that name row 1 of any table with
/// two rows).
pub fn inputs(program: &Program, shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor> {
    program
        .inputs
        .iter()
        .zip(shapes)
        .map(|(decl, shape)| {
            let mut rng = Rng::stream(seed, "input", &decl.name);
            match (decl.state, decl.mask_only || decl.dtype != DType::F32) {
                (true, _) => fill(shape, || 0.0),
                (false, true) => fill(shape, || 1.0),
                (false, false) => fill(shape, || rng.normal() as f32),
            }
        })
        .collect()
}

fn fill(shape: &[usize], mut f: impl FnMut() -> f32) -> Tensor {
    Tensor::new(shape.to_vec(), (0..numel(shape)).map(|_| f()).collect())
}

/// `nn.Linear`'s fan_in for param `index`: a weight's last axis; for a rank-1 param used as
/// the bias of a `linear`, the last axis of that linear's weight; otherwise its own length.
fn fan_in(program: &Program, index: usize, shapes: &[Vec<usize>]) -> usize {
    let own = shapes[index].last().copied().unwrap_or(1);
    let layer = (shapes[index].len() == 1)
        .then(|| {
            program
                .nodes
                .iter()
                .find_map(|node| match (&node.op, node.args.as_slice()) {
                    (Op::Linear, &[_, w, b]) if root_param(program, b) == Some(index) => {
                        root_param(program, w)
                    }
                    _ => None,
                })
        })
        .flatten();
    let fan_in = layer.and_then(|w| shapes[w].last().copied()).unwrap_or(own);
    fan_in.max(1)
}

/// The param a value is a view of (`Wq[rows]`, `Wq.transpose(0, 1)`, ...), if any.
fn root_param(program: &Program, mut id: ValueId) -> Option<usize> {
    loop {
        let node = program.node(id);
        match node.op {
            Op::Param(i) => return Some(i),
            Op::Slice { .. }
            | Op::StepSlice { .. }
            | Op::Select { .. }
            | Op::View(_)
            | Op::Reshape(_)
            | Op::Transpose(..)
            | Op::Permute(_)
            | Op::Contiguous
            | Op::Unsqueeze(_)
            | Op::Squeeze(_) => id = *node.args.first()?,
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testutil::Builder;

    /// `linear(x, W[rows], b[rows])` with `W: [4, 3]`, `b: [4]` and a lone `c: [5]`.
    fn layer() -> (Program, Vec<Vec<usize>>) {
        let mut b = Builder::new();
        let x = b.input("x", &[2, 3]);
        let w = b.param("W", &[4, 3]);
        let bias = b.param("b", &[4]);
        b.param("c", &[5]);
        let w2 = b.node(
            Op::Slice {
                axis: 0,
                start: b.int(0),
                end: b.int(2),
            },
            &[w],
            &[2, 3],
        );
        let b2 = b.node(
            Op::Slice {
                axis: 0,
                start: b.int(0),
                end: b.int(2),
            },
            &[bias],
            &[2],
        );
        let y = b.node(Op::Linear, &[x, w2, b2], &[2, 2]);
        b.output("y", y);
        (b.finish(), vec![vec![4, 3], vec![4], vec![5]])
    }

    #[test]
    fn a_bias_uses_its_layers_fan_in() {
        let (program, shapes) = layer();
        assert_eq!(fan_in(&program, 0, &shapes), 3);
        assert_eq!(fan_in(&program, 1, &shapes), 3);
        assert_eq!(fan_in(&program, 2, &shapes), 5);
        let p = params(&program, &shapes, 0);
        assert!(p[1].data.iter().all(|x| x.abs() <= 1.0 / 3f32.sqrt()));
        assert!(p[2].data.iter().all(|x| x.abs() <= 1.0 / 5f32.sqrt()));
    }

    #[test]
    fn same_seed_same_tensors_other_seed_other_tensors() {
        let (program, shapes) = layer();
        assert_eq!(params(&program, &shapes, 7), params(&program, &shapes, 7));
        assert_ne!(params(&program, &shapes, 7), params(&program, &shapes, 8));
        let x = inputs(&program, &[vec![2, 3]], 7);
        assert_eq!(x, inputs(&program, &[vec![2, 3]], 7));
        assert_ne!(x, inputs(&program, &[vec![2, 3]], 8));
    }

    #[test]
    fn streams_are_per_seed_kind_and_name() {
        let first = |seed, kind, name| Rng::stream(seed, kind, name).next_u64();
        assert_eq!(first(0, "param", "W"), first(0, "param", "W"));
        assert_ne!(first(0, "param", "W"), first(1, "param", "W"));
        assert_ne!(first(0, "param", "W"), first(0, "param", "V"));
        assert_ne!(first(0, "param", "x"), first(0, "input", "x"));
    }

    #[test]
    fn normals_have_unit_variance_and_masks_are_ones() {
        let mut r = Rng::stream(3, "input", "q");
        let xs: Vec<f64> = (0..20_000).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "{mean} {var}");

        let mut b = Builder::new();
        b.mask_input("mask", &[2, 2]);
        let program = b.finish();
        assert_eq!(inputs(&program, &[vec![2, 2]], 0)[0].data, [1.0; 4]);
    }

    #[test]
    fn bool_and_int64_inputs_are_ones() {
        for dtype in [DType::Bool, DType::I64] {
            let mut b = Builder::new();
            b.input("keep", &[3]);
            let mut program = b.finish();
            program.inputs[0].dtype = dtype;
            assert_eq!(inputs(&program, &[vec![3]], 0)[0].data, [1.0; 3], "{dtype:?}");
        }
    }
}
