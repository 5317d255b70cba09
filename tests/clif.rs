//! Snapshots of the Cranelift IR of one small kernel of each kind, kept apart from the
//! other snapshots so that a Cranelift upgrade churns only these. Each plan is made by hand
//! at tiny sizes, so a snapshot shows the structure of the code (loops, the microkernel
//! call, the exp polynomial), not the program around it.

use attnc::codegen::Jit;
use attnc::codegen::Shims;
use attnc::ir::CmpOp;
use attnc::kernel::{
    Affine, Attention, BinaryOp, Buffer, BufferKind, Epilogue, Expr, Gemm, IndexMask, Keep, Kernel, KernelOp,
    Map, MaskFill, Operand, Plan, ReduceOp, Row, ScoreMod, Softmax, Stage, UnaryOp,
};
use attnc::runtime::jit::shims;

fn buffer(kind: BufferKind, len: usize) -> Buffer {
    Buffer {
        kind,
        len,
        name: String::new(),
    }
}

fn op(buf: usize, strides: &[usize]) -> Operand {
    Operand {
        buf,
        offset: 0,
        strides: strides.to_vec(),
    }
}

/// A plan of one kernel over inputs of the given lengths and one output.
fn plan(inputs: &[usize], out: usize, kernel: KernelOp) -> Plan {
    let mut buffers: Vec<Buffer> = inputs
        .iter()
        .enumerate()
        .map(|(i, &len)| buffer(BufferKind::Input(i), len))
        .collect();
    buffers.push(buffer(BufferKind::Output(0), out));
    let p = Plan {
        buffers,
        prologue: vec![],
        kernels: vec![Kernel {
            label: "test".into(),
            op: kernel,
        }],
        outputs: vec![],
        arena_len: 0,
        derived_len: 0,
        flops: 0.0,
    };
    p.validate().expect("a valid plan");
    p
}

/// The IR with the attention tile's softmax and the GEMM epilogues in the generated code,
/// as on a CPU without AVX-512 (the text is the same on every machine).
fn clif(plan: &Plan) -> String {
    clif_with(
        plan,
        Shims {
            softmax: None,
            epilogue: None,
            ..shims()
        },
    )
}

fn clif_with(plan: &Plan, shims: Shims) -> String {
    let jit = Jit::new(shims).unwrap();
    let funcs = jit.clif(plan).unwrap();
    assert_eq!(funcs.len(), 1);
    funcs[0].1.clone()
}

#[test]
fn gemm_with_bias_calls_the_microkernel_per_tile() {
    let g = Gemm {
        batch: vec![2],
        m: 3,
        n: 8,
        k: 5,
        a: op(0, &[15, 5, 1]),
        b: op(1, &[0, 1, 5]),
        c: op(3, &[24, 8, 1]),
        alpha: 0.5,
        bias: Some(op(2, &[1])),
        epilogue: None,
        rope: Vec::new(),
        block: (3, 4),
        packed: None,
    };
    let p = plan(&[30, 40, 8], 48, KernelOp::Gemm(g));
    insta::assert_snapshot!(clif(&p));
}

#[test]
fn gemm_of_a_packed_b_calls_the_packed_microkernel_from_its_tile_panel() {
    // b's column block j0 starts k · j0 floats in: 5 · 32 for the second task.
    let g = Gemm {
        batch: vec![],
        m: 1,
        n: 40,
        k: 5,
        a: op(0, &[5, 1]),
        b: op(1, &[1, 5]),
        c: op(2, &[40, 1]),
        alpha: 1.0,
        bias: None,
        epilogue: None,
        rope: Vec::new(),
        block: (1, 32),
        packed: Some(attnc::kernel::PANEL),
    };
    let p = plan(&[5, 200], 40, KernelOp::Gemm(g));
    insta::assert_snapshot!(clif(&p));
}

/// ReLU over `c` plus a residual, with its tile of 3 × 8.
fn residual_relu_gemm() -> Plan {
    let g = Gemm {
        batch: vec![],
        m: 6,
        n: 8,
        k: 5,
        a: op(0, &[5, 1]),
        b: op(1, &[8, 1]),
        c: op(3, &[8, 1]),
        alpha: 1.0,
        bias: None,
        epilogue: Some(Epilogue {
            inputs: vec![op(2, &[8, 1])],
            expr: vec![
                Expr::Input(0),
                Expr::Input(1),
                Expr::Binary(BinaryOp::Add, 0, 1),
                Expr::Const(0.0),
                Expr::Binary(BinaryOp::Maximum, 2, 3),
            ],
            pair: false,
        }),
        rope: Vec::new(),
        block: (3, 8),
        packed: None,
    };
    plan(&[30, 40, 48], 48, KernelOp::Gemm(g))
}

#[test]
fn gemm_epilogue_applies_a_residual_and_relu_to_each_tile() {
    insta::assert_snapshot!(clif(&residual_relu_gemm()));
}

/// With the GEMM epilogues in the native shim, each tile's product is followed by one call
/// of `attnc_epilogue_tile` (SiLU's code 1, the residual as `post`, its row stride 8) in
/// place of the loop. The IR never runs, so the shim's address is not needed.
#[test]
fn gemm_epilogue_of_a_native_form_calls_the_tile_epilogue() {
    let mut p = residual_relu_gemm();
    let KernelOp::Gemm(g) = &mut p.kernels[0].op else {
        unreachable!("a GEMM plan")
    };
    // silu(c) + residual
    g.epilogue.as_mut().expect("an epilogue").expr = vec![
        Expr::Input(0),
        Expr::Unary(UnaryOp::Sigmoid, 0),
        Expr::Binary(BinaryOp::Mul, 0, 1),
        Expr::Input(1),
        Expr::Binary(BinaryOp::Add, 2, 3),
    ];
    let native = Shims {
        softmax: None,
        epilogue: Some(std::ptr::null()),
        ..shims()
    };
    insta::assert_snapshot!(clif_with(&p, native));
}

#[test]
fn softmax_scales_masks_and_normalizes_rows() {
    let s = Softmax {
        shape: vec![2, 6],
        x: op(0, &[6, 1]),
        out: op(2, &[6, 1]),
        scale: 0.5,
        mask: Some(MaskFill {
            mask: op(1, &[0, 1]),
            op: CmpOp::Eq,
            rhs: 0.0,
            fill: -1e9,
        }),
        rows_per_task: 1,
    };
    let p = plan(&[12, 6], 12, KernelOp::Softmax(s));
    insta::assert_snapshot!(clif(&p));
}

#[test]
fn attention_keeps_a_running_max_and_sum() {
    let a = Attention {
        batch: vec![2],
        n: 3,
        m: 5,
        dk: 4,
        dv: 4,
        q: op(0, &[12, 4, 1]),
        k: op(1, &[20, 1, 5]),
        v: op(2, &[20, 4, 1]),
        out: op(3, &[12, 4, 1]),
        scale: 0.5,
        mask: None,
        positions: None,
        kv_group: 1,
        score: None,
        tail: None,
        zero_empty_rows: false,
        block: (2, 4),
        split: None,
        ranges: None,
    };
    let p = plan(&[24, 40, 40], 24, KernelOp::Attention(Box::new(a)));
    insta::assert_snapshot!(clif(&p));
}

#[test]
fn attention_decides_each_tile_of_a_causal_mask_from_its_corners() {
    let p = plan(
        &[24, 40, 40],
        24,
        KernelOp::Attention(Box::new(causal_attention())),
    );
    insta::assert_snapshot!(clif(&p));
}

/// With the tile's softmax in the native shim, the generated code fills what the mask of
/// positions removes and calls `attnc_softmax_tile` once per tile. The IR never runs, so the
/// shim's address is not needed.
#[test]
fn attention_calls_the_tile_softmax_after_its_masks() {
    let p = plan(
        &[24, 40, 40],
        24,
        KernelOp::Attention(Box::new(causal_attention())),
    );
    insta::assert_snapshot!(clif_with_tile_softmax(&p));
}

#[test]
fn attention_gives_the_tile_softmax_the_keys_a_padding_mask_fills() {
    // A mask the same for every query row (`[B, 1, M]`, as BERT's): the keys it fills are
    // found once per tile into scratch and the shim reads them, not a pass over the tile.
    let padded = Attention {
        out: op(4, &[12, 4, 1]),
        mask: Some(MaskFill {
            mask: op(3, &[5, 0, 1]),
            op: CmpOp::Ne,
            rhs: 0.0,
            fill: -1e9,
        }),
        positions: None,
        ..causal_attention()
    };
    let p = plan(&[24, 40, 40, 10], 24, KernelOp::Attention(Box::new(padded)));
    insta::assert_snapshot!(clif_with_tile_softmax(&p));
}

#[test]
fn attention_gives_the_tile_softmax_an_additive_padding_mask_as_a_row_of_keys() {
    // `s + mask · min` with the mask `[B, 1, M]`: the addend is computed once per tile into
    // scratch and the shim adds it, not a pass over the tile.
    let padded = Attention {
        out: op(4, &[12, 4, 1]),
        score: Some(ScoreMod {
            inputs: vec![op(3, &[5, 0, 1])],
            expr: vec![
                Expr::Input(0),
                Expr::Input(3),
                Expr::Const(f32::MIN),
                Expr::Binary(BinaryOp::Mul, 1, 2),
                Expr::Binary(BinaryOp::Add, 0, 3),
            ],
        }),
        positions: None,
        ..causal_attention()
    };
    let p = plan(&[24, 40, 40, 10], 24, KernelOp::Attention(Box::new(padded)));
    insta::assert_snapshot!(clif_with_tile_softmax(&p));
}

#[test]
fn attention_gives_the_tile_softmax_a_bias_by_row_and_key_and_a_row_of_keys() {
    // T5's `s + (bias + mask · min)`, the bias `[M, N]` shared by the batch: the mask's
    // addend is computed once per tile into scratch, the shim adds the bias's rows as it
    // reads the scores, and no pass over the tile changes them.
    let t5 = Attention {
        out: op(5, &[12, 4, 1]),
        score: Some(ScoreMod {
            inputs: vec![op(3, &[0, 5, 1]), op(4, &[5, 0, 1])],
            expr: vec![
                Expr::Input(0),
                Expr::Input(3),
                Expr::Input(4),
                Expr::Const(f32::MIN),
                Expr::Binary(BinaryOp::Mul, 2, 3),
                Expr::Binary(BinaryOp::Add, 1, 4),
                Expr::Binary(BinaryOp::Add, 0, 5),
            ],
        }),
        positions: None,
        ..causal_attention()
    };
    let p = plan(&[24, 40, 40, 15, 10], 24, KernelOp::Attention(Box::new(t5)));
    insta::assert_snapshot!(clif_with_tile_softmax(&p));
}

/// The IR with the attention tile's softmax in the native shim (bound to no code: the IR
/// only names it).
fn clif_with_tile_softmax(plan: &Plan) -> String {
    let tile = Shims {
        softmax: Some(std::ptr::null()),
        ..shims()
    };
    clif_with(plan, tile)
}

/// A causal attention kernel at tiny sizes: 3 rows, 5 keys, tiles of 2 × 4.
fn causal_attention() -> Attention {
    Attention {
        batch: vec![2],
        n: 3,
        m: 5,
        dk: 4,
        dv: 4,
        q: op(0, &[12, 4, 1]),
        k: op(1, &[20, 1, 5]),
        v: op(2, &[20, 4, 1]),
        out: op(3, &[12, 4, 1]),
        scale: 0.5,
        mask: None,
        positions: Some(IndexMask {
            keep: Keep::Atom(Affine { ci: 1, cj: -1, c: 0 }),
            fill: f32::NEG_INFINITY,
        }),
        kv_group: 1,
        score: None,
        tail: None,
        zero_empty_rows: false,
        block: (2, 4),
        split: None,
        ranges: None,
    }
}

#[test]
fn map_fuses_an_elementwise_expression() {
    let expr = vec![
        Expr::Input(0),
        Expr::Input(1),
        Expr::Binary(BinaryOp::Mul, 0, 1),
        Expr::Unary(UnaryOp::Exp, 2),
        Expr::Const(0.0),
        Expr::Compare(CmpOp::Gt, 0, 4),
        Expr::Select(5, 4, 3),
    ];
    let m = Map {
        shape: vec![3, 5],
        inputs: vec![op(0, &[5, 1]), op(1, &[0, 1])],
        expr,
        out: op(2, &[5, 1]),
        rows_per_task: 2,
    };
    let p = plan(&[15, 5], 15, KernelOp::Map(m));
    insta::assert_snapshot!(clif(&p));
}

/// `sin` is a call per lane (four on the vector path, one on the tail), `maximum` a
/// NaN-propagating select, and `x ** 2` a product.
#[test]
fn map_calls_the_math_functions_it_has_no_vector_form_for() {
    let expr = vec![
        Expr::Input(0),
        Expr::Unary(UnaryOp::Sin, 0),
        Expr::Const(2.0),
        Expr::Binary(BinaryOp::Pow, 0, 2),
        Expr::Binary(BinaryOp::Maximum, 1, 3),
    ];
    let m = Map {
        shape: vec![6],
        inputs: vec![op(0, &[1])],
        expr,
        out: op(1, &[1]),
        rows_per_task: 1,
    };
    let p = plan(&[6], 6, KernelOp::Map(m));
    insta::assert_snapshot!(clif(&p));
}

/// `layer_norm` over rows of 9 with a weight: two sums (eight lanes a trip, four, then one
/// at a time), `rsqrt(var + eps)` once per row, then the elementwise write.
#[test]
fn row_reduces_then_writes_each_element() {
    let sum = |expr| Stage {
        reduce: ReduceOp::Sum,
        expr,
    };
    let centered = vec![
        Expr::Input(0),
        Expr::Reduced(0),
        Expr::Const(9.0),
        Expr::Binary(BinaryOp::Div, 1, 2),
        Expr::Binary(BinaryOp::Sub, 0, 3),
        Expr::Binary(BinaryOp::Mul, 4, 4),
    ];
    let write = vec![
        Expr::Input(0),
        Expr::Reduced(0),
        Expr::Reduced(1),
        Expr::Const(9.0),
        Expr::Binary(BinaryOp::Div, 1, 3),
        Expr::Binary(BinaryOp::Div, 2, 3),
        Expr::Const(1e-5),
        Expr::Binary(BinaryOp::Add, 5, 6),
        Expr::Unary(UnaryOp::Rsqrt, 7),
        Expr::Binary(BinaryOp::Sub, 0, 4),
        Expr::Binary(BinaryOp::Mul, 9, 8),
        Expr::Input(1),
        Expr::Binary(BinaryOp::Mul, 10, 11),
    ];
    let r = Row {
        rows: vec![2],
        n: 9,
        inputs: vec![op(0, &[9, 1]), op(1, &[0, 1])],
        stages: vec![sum(vec![Expr::Input(0)]), sum(centered)],
        write,
        out: op(2, &[9, 1]),
        rows_per_task: 1,
    };
    let p = plan(&[18, 9], 18, KernelOp::Row(r));
    insta::assert_snapshot!(clif(&p));
}
