//! Attention under a mask computed from run-time positions (`arange(C)[None, :] <=
//! cache_position[:, None]`, a padding mask): the kernel skips the key tiles the mask
//! removes from every row of a block, found at run time, and agrees with the interpreter
//! for causal masks, positions not starting at 0, padding, rows that keep no key, and a
//! capacity beyond the filled positions; removed keys whose values are NaN give PyTorch's
//! NaN (`softmax(s) @ v` multiplies them by 0), as checked with PyTorch 2.15:
//! `scaled_dot_product_attention` and `softmax(masked_fill(..)) @ v` both give NaN rows.
//! A mask broadcast over heads is scanned once per block of rows by a key ranges kernel,
//! whose table gives the bits of each task's own scan, on 1 thread and on 2.

use attnc::ir::Program;
use attnc::kernel::{KernelOp, Plan};
use attnc::runtime::jit::{pool, Executable};
use attnc::runtime::{bind, interpret, Bound, RunOptions, Tensor};

mod common;
use common::{assert_close, program, Rng};

const SRC: &str = "
dim B, N, C
dim H = 2, E = 16
input q: [B, H, N, E]
input k: [B, H, C, E]
input v: [B, H, C, E]
input cache_position: [N] int64
input valid: [B, C] bool
let causal = torch.arange(C)[None, :] <= cache_position[:, None]
let padded = causal[None, None, :, :] & valid[:, None, None, :]
output sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
output sdpa_padded = F.scaled_dot_product_attention(q, k, v, attn_mask=padded)
let s = (q @ k.transpose(-2, -1)) * 0.25
output soft = torch.softmax(s.masked_fill(~causal, -inf), dim=-1) @ v
let window = causal & (torch.arange(C)[None, :] > cache_position[:, None] - 40)
output sdpa_window = F.scaled_dot_product_attention(q, k, v, attn_mask=window)
";

/// The inputs: `q`, `k`, `v` drawn, the given positions, and keys `0..valid[b]` valid in
/// batch `b`; `bad`, a key whose value `key % 16` is replaced in every head.
fn inputs(
    bound: &mut Bound,
    (n, c): (usize, usize),
    positions: &[i64],
    valid: &[usize],
    bad: Option<(usize, f32)>,
) {
    let mut rng = Rng(7);
    let mut draw = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| (rng.below(2001) as f32 - 1000.0) / 1000.0)
            .collect()
    };
    let b = valid.len();
    bound.inputs[0] = Tensor::new(vec![b, 2, n, 16], draw(b * 2 * n * 16));
    bound.inputs[1] = Tensor::new(vec![b, 2, c, 16], draw(b * 2 * c * 16));
    let mut v = draw(b * 2 * c * 16);
    if let Some((key, x)) = bad {
        for head in 0..b * 2 {
            v[(head * c + key) * 16 + key % 16] = x;
        }
    }
    bound.inputs[2] = Tensor::new(vec![b, 2, c, 16], v);
    let pos = positions.iter().map(|&p| p as f32).collect();
    bound.inputs[3] = Tensor::new(vec![n], pos);
    let mask = valid
        .iter()
        .flat_map(|&len| (0..c).map(move |j| if j < len { 1.0 } else { 0.0 }))
        .collect();
    bound.inputs[4] = Tensor::new(vec![b, c], mask);
}

/// Every output on the native backend (the program as checked and as optimized) against the
/// interpreter; returns the interpreter's.
fn agrees(
    what: &str,
    (n, c): (usize, usize),
    positions: &[i64],
    valid: &[usize],
    bad: Option<(usize, f32)>,
) -> Vec<(String, Tensor)> {
    let dims = [("B", valid.len() as i64), ("N", n as i64), ("C", c as i64)];
    let prog = program(SRC, &dims);
    let mut bound = bind(&prog, &RunOptions::default()).unwrap();
    inputs(&mut bound, (n, c), positions, valid, bad);
    skipping_agrees(what, &prog, &bound)
}

/// [`agrees`] of a program bound to its inputs: both native plans skip masked tiles at run
/// time, `--stage kernels` says so, and every output is the interpreter's on 1 and 2
/// threads, with the same bits on both and where every task scans its own mask rows.
fn skipping_agrees(what: &str, prog: &Program, bound: &Bound) -> Vec<(String, Tensor)> {
    let want = interpret(prog, bound).unwrap();
    let optimized = attnc::opt::optimize(prog).program;
    for (path, p) in [("typed", prog), ("optimized", &optimized)] {
        let exe = Executable::compile(p, &bound.dims).unwrap();
        let skips = exe.plan().kernels.iter().any(|k| match &k.op {
            KernelOp::Attention(a) => a.skips_masked_tiles(),
            _ => false,
        });
        let text = exe.plan().to_text();
        assert!(skips, "{what} ({path}): no kernel skips masked tiles\n{text}");
        let shown = text.contains("skipped, found at run time");
        assert!(
            shown,
            "{what} ({path}): `--stage kernels` does not say so\n{text}"
        );
        let scanning = Executable::from_plan(scanning_per_task(exe.plan())).unwrap();
        let got = exe.run(bound, &pool(2).unwrap()).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            assert_close(&format!("{what} ({path}): {name}"), g, w);
        }
        for (how, threads, e) in [("1 thread", 1, &exe), ("own scans", 2, &scanning)] {
            let other = e.run(bound, &pool(threads).unwrap()).unwrap();
            for ((name, g), (_, o)) in got.iter().zip(&other) {
                assert!(
                    same_bits(g, o),
                    "{what} ({path}): {name} on 2 threads differs from {how}"
                );
            }
        }
    }
    want
}

/// `plan` with every attention kernel scanning its own rows of the mask, its key ranges
/// table (still written by the kernel before) unread.
fn scanning_per_task(plan: &Plan) -> Plan {
    let mut plan = plan.clone();
    for k in &mut plan.kernels {
        if let KernelOp::Attention(a) = &mut k.op {
            a.ranges = None;
        }
    }
    plan
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    let bits = |t: &Tensor| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    a.shape == b.shape && bits(a) == bits(b)
}

fn output<'a>(outputs: &'a [(String, Tensor)], name: &str) -> &'a Tensor {
    &outputs.iter().find(|(n, _)| n == name).unwrap().1
}

/// The rows `rows` of every head of output `name`, `E` = 16 values each.
fn rows_of(t: &Tensor, n: usize, rows: &[usize]) -> Vec<f32> {
    let data = t.data.as_slice();
    let heads = data.len() / (n * 16);
    (0..heads)
        .flat_map(|h| {
            rows.iter()
                .flat_map(move |&i| (0..16).map(move |e| (h * n + i) * 16 + e))
        })
        .map(|at| data[at])
        .collect()
}

/// The scan for a block's keys passes over removed keys 16 at a time, then finds the exact
/// key one at a time: rows whose last kept key (causal, padding) or first (a window of 40)
/// falls at every offset within and across those chunks give the interpreter's values.
#[test]
fn kept_ranges_ending_at_every_offset_of_a_chunk() {
    let n = 300;
    let positions: Vec<i64> = (0..n as i64).collect();
    let valid = [1, 15, 16, 17, 31, 33, 255, 256, 257, 300];
    agrees("chunk offsets", (n, n), &positions, &valid, None);
}

/// Positions falling down a block (a chunk given in reverse order): each row removes the
/// last key the rows before it keep, which must stay among the block's keys. Key 256, the
/// first of the second tile, is kept by the first row only; the caches' capacities put it
/// at every offset of the backward scan's chunks of 16.
#[test]
fn a_key_only_an_earlier_row_keeps_stays_visible() {
    let n = 64;
    let positions: Vec<i64> = (0..n as i64).map(|r| 256 - r).collect();
    for c in 258..274 {
        agrees(&format!("falling, C = {c}"), (n, c), &positions, &[c, 257], None);
    }
}

#[test]
fn causal_prefill_from_position_zero() {
    let n = 300;
    let positions: Vec<i64> = (0..n as i64).collect();
    agrees("prefill", (n, n), &positions, &[n, 200], None);
}

#[test]
fn positions_not_starting_at_zero_in_a_larger_cache() {
    let n = 70;
    let positions: Vec<i64> = (400..400 + n as i64).collect();
    agrees("chunk at 400", (n, 1100), &positions, &[1100, 450], None);
}

#[test]
fn one_token_in_a_cache_mostly_empty() {
    agrees("decode at 5", (1, 2048), &[5], &[2048, 3], None);
    agrees("decode at 1500", (1, 2048), &[1500], &[2048, 1600], None);
}

#[test]
fn rows_that_keep_no_key_give_pytorchs_values() {
    // Position -1 keeps no key: `scaled_dot_product_attention` gives 0, `softmax` NaN; a
    // block of rows where every row keeps none visits no tile.
    let n = 130;
    let positions: Vec<i64> = (0..n as i64).map(|i| if i < 70 { -1 } else { i }).collect();
    let want = agrees("empty rows", (n, 600), &positions, &[600, 600], None);
    let empty: Vec<usize> = (0..70).collect();
    assert!(rows_of(output(&want, "sdpa"), n, &empty)
        .iter()
        .all(|&x| x == 0.0));
    assert!(rows_of(output(&want, "soft"), n, &empty)
        .iter()
        .all(|x| x.is_nan()));
}

/// Keys 1000 and 1013 lie in a tile no row keeps, keys 100 and 255 in the part of the
/// first tile past the keys the rows keep (0 to 3), which a visit cuts off where its values
/// are finite; PyTorch multiplies their values by 0, so a NaN or an infinity there (at
/// values 8 and 5 of the key's 16, in different vectors of the check) gives NaN.
#[test]
fn removed_keys_with_nan_values_give_nan_as_pytorch_does() {
    let keys = [
        (1000, f32::NAN),
        (1013, f32::INFINITY),
        (100, f32::NAN),
        (255, f32::INFINITY),
    ];
    for (key, x) in keys {
        let what = format!("{x} at {key}");
        let want = agrees(&what, (4, 1100), &[0, 1, 2, 3], &[1100, 1100], Some((key, x)));
        let rows: Vec<usize> = (0..4).collect();
        assert!(rows_of(output(&want, "sdpa"), 4, &rows)
            .iter()
            .any(|x| x.is_nan()));
        assert!(rows_of(output(&want, "soft"), 4, &rows)
            .iter()
            .any(|x| x.is_nan()));
    }
}

const HOLES: &str = "
dim B, N, C
dim H = 2, E = 16
input q: [B, H, N, E]
input k: [B, H, C, E]
input v: [B, H, C, E]
input keep: [N, C] bool
output sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
";

/// A tile is left untested against the mask only where every row of the block keeps all of
/// it: rows keeping a prefix of the keys with holes (one row removes key 100, inside the
/// first tile the others keep whole; another removes a run in the second tile; every
/// seventh row a key of its own) still have each hole removed.
#[test]
fn a_key_one_row_removes_inside_a_tile_the_others_keep_is_removed() {
    let (n, c) = (64, 600);
    let dims = [("B", 1), ("N", n as i64), ("C", c as i64)];
    let prog = program(HOLES, &dims);
    let mut bound = bind(&prog, &RunOptions::default()).unwrap();
    let keep: Vec<f32> = (0..n)
        .flat_map(|r| (0..c).map(move |j| (r, j)))
        .map(|(r, j)| {
            let hole = (r == 5 && j == 100)
                || (r == 40 && (260..270).contains(&j))
                || (r % 7 == 0 && j == 3 * r + 1);
            if j < 300 + r && !hole {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    bound.inputs[3] = Tensor::new(vec![n, c], keep);
    skipping_agrees("holes", &prog, &bound);
}

const HEADS: &str = "
dim B, N, C
dim H = 2, E = 16
input q: [B, H, N, E]
input k: [B, H, C, E]
input v: [B, H, C, E]
input cache_position: [N] int64
input keep: [B, H, N, C] bool
let causal = torch.arange(C)[None, :] <= cache_position[:, None]
let s = (q @ k.transpose(-2, -1)) * 0.25
output shared = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
output soft = torch.softmax(s.masked_fill(~causal, -inf), dim=-1) @ v
output per_batch = F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, 0:1])
output per_head = F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep)
";

/// A mask broadcast over the batch and the heads (`causal`) has its key ranges found once
/// per block of rows, one broadcast over the heads only (padding per batch index) once per
/// block of each batch index, and one that varies per head is scanned by each task: all
/// give the interpreter's values, rows that keep no key included (NaN under `softmax`, 0
/// under SDPA), with the same bits as scans in every task.
#[test]
fn a_mask_broadcast_over_heads_is_scanned_once_per_block() {
    let (b, n, c) = (3, 150, 700);
    let dims = [("B", b as i64), ("N", n as i64), ("C", c as i64)];
    let prog = program(HEADS, &dims);
    let mut bound = bind(&prog, &RunOptions::default()).unwrap();
    let mut rng = Rng(11);
    let mut draw = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| (rng.below(2001) as f32 - 1000.0) / 1000.0)
            .collect()
    };
    bound.inputs[0] = Tensor::new(vec![b, 2, n, 16], draw(b * 2 * n * 16));
    bound.inputs[1] = Tensor::new(vec![b, 2, c, 16], draw(b * 2 * c * 16));
    bound.inputs[2] = Tensor::new(vec![b, 2, c, 16], draw(b * 2 * c * 16));
    // Rows 0..10 keep no key; row i of the others is position 4i, so the blocks of rows
    // see different tiles of the 700 keys.
    let positions = (0..n).map(|i| if i < 10 { -1.0 } else { (4 * i) as f32 });
    bound.inputs[3] = Tensor::new(vec![n], positions.collect());
    // Batch index 1 pads its last 100 keys in both heads, index 2 keeps every key in head 0
    // only; head 1 removes every fifth row of index 0 whole, and key 7 from every row.
    let keep = (0..b * 2 * n * c).map(|at| {
        let (j, i, h, bi) = (at % c, at / c % n, at / (c * n) % 2, at / (c * n * 2));
        let removed = (bi == 1 && j >= c - 100)
            || (bi == 2 && h == 1 && j % 3 == 0)
            || (h == 1 && bi == 0 && i % 5 == 0)
            || (h == 1 && j == 7);
        if removed {
            0.0
        } else {
            1.0
        }
    });
    bound.inputs[4] = Tensor::new(vec![b, 2, n, c], keep.collect());
    let want = skipping_agrees("heads", &prog, &bound);
    let optimized = attnc::opt::optimize(&prog).program;
    for (path, p) in [("typed", &prog), ("optimized", &optimized)] {
        let plan = Executable::compile(p, &bound.dims).unwrap().plan().clone();
        let text = plan.to_text();
        let mut tables: Vec<Vec<usize>> = (plan.kernels.iter())
            .filter_map(|k| match &k.op {
                KernelOp::KeyRanges(r) => Some(r.batch.clone()),
                _ => None,
            })
            .collect();
        tables.sort();
        tables.dedup();
        assert_eq!(tables, [vec![1, 1], vec![b, 1]], "{path}\n{text}");
        for k in &plan.kernels {
            if let KernelOp::Attention(a) = &k.op {
                let mask = a.mask.as_ref().expect("every attention here is masked");
                let broadcast = mask.mask.strides[..2].contains(&0);
                let reads = a.ranges.is_some();
                assert_eq!(reads, broadcast, "{path}: {}\n{text}", k.label);
            }
        }
    }
    let empty: Vec<usize> = (0..10).collect();
    assert!(rows_of(output(&want, "soft"), n, &empty)
        .iter()
        .all(|x| x.is_nan()));
    for name in ["shared", "per_batch", "per_head"] {
        let rows = rows_of(output(&want, name), n, &empty);
        assert!(rows.iter().all(|&x| x == 0.0), "{name}");
    }
}

const PARAM_MASK: &str = "
dim B, N
dim H = 2, E = 16
param w: [N, N]
input q: [B, H, N, E]
input k: [B, H, N, E]
input v: [B, H, N, E]
output out = F.scaled_dot_product_attention(q, k, v, attn_mask=w > 0.0)
";

/// A mask computed from params alone has its key ranges found by the prologue, once per
/// set of weights, and read by the attention kernel on every call.
#[test]
fn a_mask_of_params_has_its_key_ranges_found_once_per_weights() {
    let prog = program(PARAM_MASK, &[("B", 2), ("N", 300)]);
    let bound = bind(&prog, &RunOptions::default()).unwrap();
    skipping_agrees("params", &prog, &bound);
    let plan = Executable::compile(&prog, &bound.dims).unwrap().plan().clone();
    let found = (plan.prologue.iter()).any(|k| matches!(&k.op, KernelOp::KeyRanges(r) if r.batch == [1, 1]));
    let read = (plan.kernels.iter()).any(|k| matches!(&k.op, KernelOp::Attention(a) if a.ranges.is_some()));
    assert!(found && read, "{}", plan.to_text());
}

const SHARED_MASK: &str = "
dim N, C
dim H = 2, E = 16
state m: [N, C]
input q: [1, H, N, E]
input k: [1, H, C, E]
input v: [1, H, C, E]
input rows: [1] int64
input fresh: [1, C]
let keep = m > 0.0
output first = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
output second = F.scaled_dot_product_attention(q * 0.5, k, v, attn_mask=keep)
m.index_copy_(0, rows, fresh)
output after = F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0.0)
";

/// Attentions of one mask read one table of its key ranges, as a model's layers do; the
/// mask of the state after a write to it (a row replaced) gets a table of its own.
/// Row 3 of the state keeps only key 5 at first and every key after the write; the other
/// rows keep the keys up to 4 times their index.
#[test]
fn attentions_of_one_mask_share_its_key_ranges_until_it_is_written() {
    let (n, c) = (70, 300);
    let prog = program(SHARED_MASK, &[("N", n as i64), ("C", c as i64)]);
    let mut bound = bind(&prog, &RunOptions::default()).unwrap();
    let keep = |i: usize, j: usize| if i == 3 { j == 5 } else { j <= 4 * i };
    let state = (0..n * c).map(|at| keep(at / c, at % c) as u8 as f32).collect();
    let at = |name: &str| prog.inputs.iter().position(|i| i.name == name).unwrap();
    bound.inputs[at("m")] = Tensor::new(vec![n, c], state);
    bound.inputs[at("rows")] = Tensor::new(vec![1], vec![3.0]);
    bound.inputs[at("fresh")] = Tensor::new(vec![1, c], vec![1.0; c]);
    let want = interpret(&prog, &bound).unwrap();
    for (path, p) in [
        ("typed", prog.clone()),
        ("optimized", attnc::opt::optimize(&prog).program),
    ] {
        let exe = Executable::compile(&p, &bound.dims).unwrap();
        let text = exe.plan().to_text();
        let tables = (exe.plan().kernels.iter())
            .filter(|k| matches!(k.op, KernelOp::KeyRanges(_)))
            .count();
        assert_eq!(tables, 2, "{path}\n{text}");
        let got = exe.run(&bound, &pool(2).unwrap()).unwrap();
        for (name, w) in want.iter().filter(|(name, _)| name != "m") {
            assert_close(&format!("{path}: {name}"), output(&got, name), w);
        }
    }
    let row3 = |name: &str| rows_of(output(&want, name), n, &[3]);
    assert_ne!(row3("first"), row3("after"), "the write must change row 3");
}
