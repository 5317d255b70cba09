//! The text form of a plan: one line per buffer, a few lines per kernel.

use super::{
    Attention, BufferKind, Expr, Gemm, KernelOp, KeyRanges, Map, MaskFill, Operand, Plan, Row, Scatter,
    Softmax, POSITION_CHUNK,
};
use std::fmt::Write as _;

pub fn buffers(plan: &Plan, out: &mut String) {
    let _ = writeln!(out, "buffers:");
    for (i, b) in plan.buffers.iter().enumerate() {
        let what = match &b.kind {
            BufferKind::Param(_) => format!("param  {}", b.name),
            BufferKind::Input(_) => format!("input  {}", b.name),
            BufferKind::Output(_) => format!("output {}", b.name),
            BufferKind::State { .. } => format!("state  {} (read and written in place)", b.name),
            BufferKind::Temp { offset, live } => {
                format!(
                    "temp   arena +{} bytes, live k{}..k{}",
                    offset * 4,
                    live.0,
                    live.1
                )
            }
            BufferKind::Derived { offset, live } if live.1 == usize::MAX => {
                format!("derived prepared +{} bytes", offset * 4)
            }
            BufferKind::Derived { offset, live } => format!(
                "derived prepared +{} bytes, live p{}..p{} (a step of the prologue)",
                offset * 4,
                live.0,
                live.1
            ),
        };
        let _ = writeln!(out, "  b{i:<3} {:>10} bytes  {what}", b.len * 4);
    }
}

fn operand(o: &Operand) -> String {
    let strides: Vec<String> = o.strides.iter().map(|s| s.to_string()).collect();
    format!("b{}+{} strides [{}]", o.buf, o.offset, strides.join(", "))
}

fn dims(d: &[usize]) -> String {
    let parts: Vec<String> = d.iter().map(|s| s.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

fn mask(out: &mut String, m: Option<&MaskFill>) {
    if let Some(m) = m {
        let _ = writeln!(
            out,
            "      mask {}: where mask {} {:?} fill {:?}",
            operand(&m.mask),
            m.op.symbol(),
            m.rhs,
            m.fill
        );
    }
}

pub fn kernels(plan: &Plan, out: &mut String) {
    if !plan.prologue.is_empty() {
        let _ = writeln!(out, "prologue (once per weights):");
        list(&plan.prologue, "p", out);
    }
    let _ = writeln!(out, "kernels:");
    list(&plan.kernels, "k", out);
    let total: usize = plan.kernels.iter().map(|k| k.op.bytes()).sum();
    let _ = writeln!(
        out,
        "moved per call: {} (each operand's elements once)",
        byte_size(total)
    );
}

/// A byte count in the largest binary unit that keeps it at 1 or more.
pub fn byte_size(n: usize) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < units.len() {
        x /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} bytes"),
        _ => format!("{x:.1} {}", units[unit]),
    }
}

fn list(kernels: &[super::Kernel], prefix: &str, out: &mut String) {
    for (i, k) in kernels.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {prefix}{i} {} `{}`: {} tasks, moves {}",
            k.op.kind(),
            k.label,
            k.op.tasks(),
            byte_size(k.op.bytes())
        );
        match &k.op {
            KernelOp::Gemm(g) => gemm(out, g),
            KernelOp::Softmax(s) => softmax(out, s),
            KernelOp::Attention(a) => attention(out, a),
            KernelOp::Map(m) => map(out, m),
            KernelOp::Scatter(s) => scatter(out, s),
            KernelOp::Row(r) => row(out, r),
            KernelOp::KeyRanges(r) => key_ranges(out, r),
        }
    }
}

/// A GEMM's tiles, operands, epilogue and rotary embeddings.
fn gemm(out: &mut String, g: &Gemm) {
    let _ = writeln!(
        out,
        "      for batch {} in tiles of {}x{}: c[m {}, n {}] = {:?} * a @ b over k {}{}",
        dims(&g.batch),
        g.block.0,
        g.block.1,
        g.m,
        g.n,
        g.alpha,
        g.k,
        if g.bias.is_some() { " + bias" } else { "" }
    );
    for (name, o) in [("a", &g.a), ("b", &g.b), ("c", &g.c)] {
        let _ = writeln!(out, "      {name} {}", operand(o));
    }
    if let Some(width) = g.packed {
        let _ = writeln!(out, "      b packed in panels of {width} columns");
    }
    if let Some(b) = &g.bias {
        let _ = writeln!(out, "      bias {}", operand(b));
    }
    if let Some(e) = &g.epilogue {
        let text = expr_text(&e.expr, e.expr.len() - 1);
        let leaves = match e.pair {
            true => "in0, in1 = c of the last batch axis' two products, into the first",
            false => "in0 = c",
        };
        let _ = writeln!(out, "      then per tile: c = {text} ({leaves})");
        for (j, o) in e.inputs.iter().enumerate() {
            let _ = writeln!(out, "      in{} {}", j + e.leaves(), operand(o));
        }
    }
    for r in &g.rope {
        let _ = writeln!(
            out,
            "      then rotary embeddings of columns {}..{} ({} heads of {}), row i at position i % {}: c = c * cos + rotate_half(c) * sin, halves of {}",
            r.start,
            r.end(),
            r.heads,
            r.dim,
            r.period,
            r.dim / 2
        );
        let _ = writeln!(out, "      cos {}", operand(&r.cos));
        let _ = writeln!(out, "      sin {}", operand(&r.sin));
    }
}

/// A softmax's rows and operands.
fn softmax(out: &mut String, s: &Softmax) {
    let _ = writeln!(
        out,
        "      over {} by rows of {} ({} per task): out = softmax(x * {:?}{})",
        dims(&s.shape),
        s.shape.last().copied().unwrap_or(1),
        s.rows_per_task,
        s.scale,
        if s.mask.is_some() { ", masked" } else { "" }
    );
    let _ = writeln!(out, "      x {}", operand(&s.x));
    let _ = writeln!(out, "      out {}", operand(&s.out));
    mask(out, s.mask.as_ref());
}

/// An attention kernel's blocks, operands, and what it reads in place or computes itself.
fn attention(out: &mut String, a: &Attention) {
    let _ = writeln!(
        out,
        "      for batch {} in blocks of {} rows x {} keys: out[n {}, dv {}] = softmax({:?} * q @ kT{}) @ v over dk {}, m {}",
        dims(&a.batch),
        a.block.0,
        a.block.1,
        a.n,
        a.dv,
        a.scale,
        if a.mask.is_some() { ", masked" } else { "" },
        a.dk,
        a.m
    );
    for (name, o) in [("q", &a.q), ("k", &a.k), ("v", &a.v), ("out", &a.out)] {
        let _ = writeln!(out, "      {name} {}", operand(o));
    }
    if let Some(t) = &a.tail {
        let first = a.m - t.len;
        let _ = writeln!(
            out,
            "      keys {first}..{} read in place from k {} and v {}",
            a.m,
            operand(&t.k),
            operand(&t.v)
        );
    }
    if a.kv_group > 1 {
        let _ = writeln!(
            out,
            "      k, v read in place: query head h reads head h / {}",
            a.kv_group
        );
    }
    if let Some(score) = &a.score {
        let formula = expr_text(&score.expr, score.expr.len() - 1);
        let _ = writeln!(
            out,
            "      score (in0 the score, in1 = i, in2 = j): s = {formula}"
        );
        for (k, o) in score.inputs.iter().enumerate() {
            let _ = writeln!(out, "      in{} {}", k + 3, operand(o));
        }
    }
    mask(out, a.mask.as_ref());
    if a.skips_masked_tiles() {
        let _ = writeln!(
            out,
            "      tiles the mask removes from every row of a block: skipped, found at run time (visited where their values are not finite)"
        );
    }
    if let Some(r) = &a.ranges {
        let _ = writeln!(
            out,
            "      key ranges of each block read from {} (found once for the heads the mask is broadcast over)",
            operand(r)
        );
    }
    positions(out, a);
    if a.zero_empty_rows {
        let _ = writeln!(out, "      a row without keys is 0");
    }
    if let Some(s) = a.split {
        let _ = writeln!(
            out,
            "      keys split in {} chunks of {}: out holds each chunk's rows, max and sum, merged by the next kernel",
            s.chunks, s.len
        );
    }
}

/// What a key ranges kernel finds, and its operands.
fn key_ranges(out: &mut String, r: &KeyRanges) {
    let chunks = r.split.map_or(String::new(), |s| {
        format!(", keys in {} chunks of {}", s.chunks, s.len)
    });
    let _ = writeln!(
        out,
        "      for batch {} in blocks of {} rows{chunks}: the keys any row keeps and every row keeps, of n {}, m {}",
        dims(&r.batch),
        r.rows,
        r.n,
        r.m
    );
    mask(out, Some(&r.mask));
    let _ = writeln!(out, "      out {}", operand(&r.out));
}

/// A map's formula and operands.
fn map(out: &mut String, m: &Map) {
    let _ = writeln!(
        out,
        "      over {} ({} rows per task): out = {}",
        dims(&m.shape),
        m.rows_per_task,
        expr_text(&m.expr, m.expr.len() - 1)
    );
    for (j, o) in m.inputs.iter().enumerate() {
        let _ = writeln!(out, "      in{j} {}", operand(o));
    }
    let _ = writeln!(out, "      out {}", operand(&m.out));
}

/// A scatter's axis and operands.
fn scatter(out: &mut String, s: &Scatter) {
    let _ = writeln!(
        out,
        "      in place: out[.., index[n], ..] = source[.., n, ..] on axis {} over {}, positions in 0..{}",
        s.axis,
        dims(&s.shape),
        s.size
    );
    for (name, o) in [("index", &s.index), ("source", &s.source), ("out", &s.out)] {
        let _ = writeln!(out, "      {name} {}", operand(o));
    }
}

/// A row kernel's stages, formula and operands.
fn row(out: &mut String, r: &Row) {
    let what = if r.per_row() {
        "a value per row"
    } else {
        "each element"
    };
    let _ = writeln!(
        out,
        "      over {} rows of {} ({} rows per task), writing {what}:",
        dims(&r.rows),
        r.n,
        r.rows_per_task
    );
    for (k, s) in r.stages.iter().enumerate() {
        let f = expr_text(&s.expr, s.expr.len() - 1);
        let _ = writeln!(out, "      r{k} = {}({f})", s.reduce.name());
    }
    let _ = writeln!(out, "      out = {}", expr_text(&r.write, r.write.len() - 1));
    for (j, o) in r.inputs.iter().enumerate() {
        let _ = writeln!(out, "      in{j} {}", operand(o));
    }
    let _ = writeln!(out, "      out {}", operand(&r.out));
}

/// An expression as nested calls, e.g. `select(ne(in1, 0.0), -1e9, in0)`.
pub fn expr_text(expr: &[Expr], i: usize) -> String {
    let e = |j: usize| expr_text(expr, j);
    match &expr[i] {
        Expr::Input(j) => format!("in{j}"),
        Expr::Const(c) => format!("{c:?}"),
        Expr::Reduced(k) => format!("r{k}"),
        Expr::Index(a) => format!("index{a}"),
        Expr::Unary(op, a) => format!("{}({})", op.name(), e(*a)),
        Expr::Binary(op, a, b) => match op.infix() {
            Some(symbol) => format!("({} {symbol} {})", e(*a), e(*b)),
            None => format!("{}({}, {})", op.name(), e(*a), e(*b)),
        },
        Expr::Compare(op, a, b) => format!("({} {} {})", e(*a), op.symbol(), e(*b)),
        Expr::Select(m, v, x) => format!("select({}, {}, {})", e(*m), e(*v), e(*x)),
    }
}

/// A mask of positions: its formula, and the chunks of its tiles counted by what the kernel
/// does with them.
fn positions(out: &mut String, a: &Attention) {
    let (Some(p), Some(t)) = (&a.positions, a.tile_counts()) else {
        return;
    };
    let _ = writeln!(out, "      positions: keep {}, else {:?}", p.keep, p.fill);
    let removed = match a.skips_tiles() {
        true => "skipped",
        false => "removed but visited (a row keeps no key)",
    };
    let _ = writeln!(
        out,
        "      chunks of {} keys: {} kept whole, {} partial, {} {removed}",
        POSITION_CHUNK.min(a.block.1),
        t.kept,
        t.partial,
        t.skipped
    );
}
