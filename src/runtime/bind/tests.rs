use super::*;
use crate::dims::DimTable;
use crate::ir::{CmpOp, DimAssert};
use crate::runtime::files::save;
use crate::runtime::testutil::{fixture, mha, scratch, Builder, Mask};
use crate::source::Span;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::{Path, PathBuf};

const PAD: &str = "pad_b2_n7_d16_h4";

fn files(name: &str) -> RunOptions {
    RunOptions {
        weights: Some(fixture(&format!("weights_{name}.safetensors"))),
        inputs: Some(fixture(&format!("inputs_{name}.safetensors"))),
        seed: 0,
        max_memory: None,
    }
}

/// Writes raw tensors of any dtype: `(name, dtype, shape, little-endian bytes)`.
fn write_raw(path: &PathBuf, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()));
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// The pad fixture's inputs with `key` replaced by a tensor of `shape`, as `file` in `dir`.
fn inputs_with_key(dir: &Path, shape: &[usize], file: &str) -> PathBuf {
    let original = TensorFile::open(&fixture(&format!("inputs_{PAD}.safetensors"))).unwrap();
    let mut tensors: Vec<(String, Tensor)> = ["query", "value", "mask"]
        .iter()
        .map(|n| (n.to_string(), original.get(n).unwrap().tensor.unwrap()))
        .collect();
    let numel = shape.iter().product();
    tensors.push(("key".into(), Tensor::new(shape.to_vec(), vec![0.5; numel])));
    let path = dir.join(file);
    save(&path, &tensors).unwrap();
    path
}

fn error(program: &Program, opts: &RunOptions) -> RunError {
    bind(program, opts).unwrap_err()
}

/// Sets the value of free dim `name` as `--dim name=value` does.
fn set_dim(program: &mut Program, name: &str, value: i64) {
    let s = program.dims.lookup(name).unwrap();
    program.dims.set_kind(s, DimKind::Free { value: Some(value) });
}

fn sym_value(dims: &DimTable, bound: &Bound, name: &str) -> Option<i64> {
    bound.dims[dims.lookup(name).unwrap()]
}

#[test]
fn inputs_bind_free_dims_and_derived_dims_get_values() {
    let program = mha(16, 4, Mask::Padding);
    let bound = bind(&program, &files(PAD)).unwrap();
    assert_eq!(sym_value(&program.dims, &bound, "B"), Some(2));
    assert_eq!(sym_value(&program.dims, &bound, "M"), Some(7));
    assert_eq!(sym_value(&program.dims, &bound, "Dk"), Some(4));
    assert_eq!(bound.params[0].shape, [16, 16]);
}

#[test]
fn e0301_inputs_disagree_over_a_free_dim() {
    let dir = scratch("bind");
    let opts = RunOptions {
        inputs: Some(inputs_with_key(dir.path(), &[2, 5, 16], "key5.safetensors")),
        ..files(PAD)
    };
    let e = error(&mha(16, 4, Mask::Padding), &opts);
    assert_eq!(e.code, Some(Code::E0301));
    assert_eq!(
        e.message,
        "input `value` has size 7 on axis 1, but `M` is 5 from input `key`"
    );
}

#[test]
fn e0301_an_input_disagrees_with_dim_flag_constant_or_rank() {
    let mut program = mha(16, 4, Mask::Padding);
    set_dim(&mut program, "N", 3);
    let e = error(&program, &files(PAD));
    assert_eq!(e.code, Some(Code::E0301));
    assert!(e.message.ends_with("but `N` is 3 from `--dim N=3`"), "{e}");

    let e = error(&mha(8, 4, Mask::Padding), &files(PAD));
    assert_eq!(
        e.message,
        "input `query` has size 16 on axis 2, but its declaration says `D` = 8"
    );

    let dir = scratch("bind");
    let opts = RunOptions {
        inputs: Some(inputs_with_key(dir.path(), &[2, 7], "rank2.safetensors")),
        ..files(PAD)
    };
    let e = error(&mha(16, 4, Mask::Padding), &opts);
    assert_eq!(e.code, Some(Code::E0301));
    assert!(e.message.contains("rank 3"), "{e}");
}

#[test]
fn e0302_a_missing_weight_names_the_nearest_keys() {
    let mut program = mha(16, 4, Mask::Padding);
    program.params[0].key = "linears.0.weigth".into();
    let e = error(&program, &files(PAD));
    assert_eq!(e.code, Some(Code::E0302));
    assert!(
        e.message.contains("`linears.0.weigth`") && e.message.contains("weights_pad"),
        "{e}"
    );
    assert!(
        e.hints[0].starts_with("did you mean `linears.0.weight`"),
        "{:?}",
        e.hints
    );
}

#[test]
fn e0302_a_missing_input() {
    let mut program = mha(16, 4, Mask::Padding);
    program.inputs[0].name = "queries".into();
    let e = error(&program, &files(PAD));
    assert_eq!(e.code, Some(Code::E0302));
    assert!(e.to_string().contains("did you mean `query`"), "{e}");
}

#[test]
fn e0303_a_weight_of_the_wrong_shape_or_dtype() {
    let mut program = mha(16, 4, Mask::Padding);
    program.params[0].shape.pop();
    let e = error(&program, &files(PAD));
    assert_eq!(e.code, Some(Code::E0303));
    assert!(e.message.contains("has shape [16, 16]"), "{e}");

    let dir = scratch("bind");
    let weights = dir.path().join("int_weights.safetensors");
    write_raw(
        &weights,
        &[(
            "w",
            Dtype::I64,
            vec![2],
            [1i64, 2].iter().flat_map(|x| x.to_le_bytes()).collect(),
        )],
    );
    let mut b = Builder::new();
    b.param("w", &[2]);
    let opts = RunOptions {
        weights: Some(weights),
        ..Default::default()
    };
    let e = error(&b.finish(), &opts);
    assert_eq!(e.code, Some(Code::E0303));
    assert!(e.message.contains("dtype I64"), "{e}");
}

#[test]
fn masks_may_be_bool_and_convert_to_ones_and_zeros() {
    let dir = scratch("bind");
    let inputs = dir.path().join("bool_mask.safetensors");
    write_raw(&inputs, &[("m", Dtype::BOOL, vec![3], vec![1, 0, 1])]);
    let mut b = Builder::new();
    b.mask_input("m", &[3]);
    let opts = RunOptions {
        inputs: Some(inputs),
        ..Default::default()
    };
    assert_eq!(bind(&b.finish(), &opts).unwrap().inputs[0].data, [1.0, 0.0, 1.0]);
}

#[test]
fn e0304_a_free_dim_without_a_value() {
    let e = error(&mha(16, 4, Mask::Padding), &RunOptions::default());
    assert_eq!(e.code, Some(Code::E0304));
    assert_eq!(e.message, "free dim `B` has no value");
    assert!(e.hints[0].contains("--dim B="), "{:?}", e.hints);
}

#[test]
fn defaults_follow_the_dim_flags_and_the_seed() {
    let mut program = mha(16, 4, Mask::Padding);
    for (name, value) in [("B", 1), ("N", 3), ("M", 5)] {
        set_dim(&mut program, name, value);
    }
    let bound = bind(&program, &RunOptions::default()).unwrap();
    assert_eq!(bound.inputs[1].shape, [1, 5, 16]);
    assert_eq!(bound.inputs[3].data, [1.0; 5], "a mask is all ones");
    assert!(
        bound.params[1].data.iter().all(|x| x.abs() <= 0.25),
        "bias of fan_in 16"
    );
    let again = bind(&program, &RunOptions::default()).unwrap();
    assert_eq!(bound, again);
    let other = bind(
        &program,
        &RunOptions {
            seed: 1,
            ..Default::default()
        },
    )
    .unwrap();
    assert_ne!(bound.params, other.params);
    assert_ne!(bound.inputs[0], other.inputs[0]);
}

#[test]
fn e0209_an_assert_false_for_the_bound_dims() {
    let mut program = mha(16, 4, Mask::Padding);
    let n = Poly::sym(program.dims.lookup("N").unwrap());
    let lhs = program.dims.rem(&n, &Poly::int(2)).unwrap();
    program.asserts.push(DimAssert {
        lhs,
        op: CmpOp::Eq,
        rhs: Poly::int(0),
        text: "N % 2 == 0".into(),
        span: Span::default(),
    });
    let e = error(&program, &files(PAD));
    assert_eq!(e.code, Some(Code::E0209));
    assert_eq!(
        e.to_string(),
        "error[E0209]: assert `N % 2 == 0` is false for N = 7"
    );
}

#[test]
fn an_unreadable_file_is_an_error_naming_it() {
    let dir = scratch("bind");
    let opts = RunOptions {
        weights: Some(dir.path().join("nowhere.safetensors")),
        ..Default::default()
    };
    let e = error(&mha(16, 4, Mask::Padding), &opts);
    assert_eq!(e.code, None);
    assert!(e.message.contains("nowhere.safetensors"), "{e}");
}

#[test]
fn a_default_too_large_to_allocate_is_an_error() {
    let mut program = mha(16, 4, Mask::Padding);
    for name in ["B", "N", "M"] {
        set_dim(&mut program, name, 1 << 30);
    }
    let e = error(&program, &RunOptions::default());
    assert_eq!(e.code, Some(Code::E0305));
    assert!(e.message.contains("a size that overflows 64 bits"), "{e}");
}
