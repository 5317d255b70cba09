//! The memory budget of a run (E0305): checked once the dims are bound, before anything is
//! allocated, with the byte counts of [`crate::size`].
//!
//! Two checks, one per stage that knows the sizes: [`program`] before the tensors are drawn
//! or read (every value of the program fits 64 bits; the params, the inputs and the largest
//! value fit the budget together, which every backend needs at least), and [`plan`] before
//! an executable allocates its arena (everything the kernel plan holds at once).

use super::RunError;
use crate::diagnostic::Code;
use crate::dims::{DimKind, Poly};
use crate::ir::Program;
use crate::kernel::{BufferKind, Plan};
use crate::size::{self, TooLarge};

/// The default budget: the machine's physical memory.
pub fn physical_memory() -> u64 {
    super::native::physical_memory()
}

fn too_large(e: TooLarge) -> RunError {
    let hint = match e.bytes > u128::from(u64::MAX) {
        true => "run with smaller dims",
        false => "run with smaller dims, or give a larger budget with `--max-memory BYTES`",
    };
    RunError::new(Some(Code::E0305), format!("the program does not fit: {e}")).with_hint(hint)
}

/// E0305 when a value of `program` does not fit for the bound `dims`.
pub fn program(program: &Program, dims: &[Option<i64>], budget: u64) -> Result<(), RunError> {
    let table = &program.dims;
    // The bytes of a shape; `None` when it depends on a loop variable (not bound here).
    let bytes = |shape: &[Poly]| -> Option<u128> {
        let mut sizes = Vec::new();
        for p in shape {
            match table.eval(p, &|s| dims.get(s).copied().flatten()) {
                Some(v) => sizes.push(u128::try_from(v).unwrap_or(0)),
                None if in_loop(program, p) => return None,
                // Bound dims that give no value overflowed 64 bits on the way.
                None => return Some(u128::MAX),
            }
        }
        Some(size::bytes(&sizes))
    };
    let shown = |name: &str, shape: &[Poly]| {
        let sizes: Vec<String> = shape
            .iter()
            .map(|p| match table.eval(p, &|s| dims.get(s).copied().flatten()) {
                Some(v) => v.to_string(),
                None => table.display(p),
            })
            .collect();
        format!("tensor `{name}` of shape [{}]", sizes.join(", "))
    };
    let mut sources = 0u128;
    let decls = program.params.iter().map(|p| (&p.name, &p.shape));
    for (name, shape) in decls.chain(program.inputs.iter().map(|i| (&i.name, &i.shape))) {
        let b = bytes(shape).unwrap_or(0);
        TooLarge::check(|| shown(name, shape), b, u64::MAX).map_err(too_large)?;
        sources = sources.saturating_add(b);
    }
    TooLarge::check(|| "the sum of the params and inputs".into(), sources, budget).map_err(too_large)?;
    // Named values first, so that the error names what the user wrote where it can; a
    // value's `%id` is written only for an error.
    let named = program.bindings.iter().map(|b| (b.value, Some(b.name.as_str())));
    let unnamed = (0..program.nodes.len()).map(|id| (id, None));
    for (id, name) in named.chain(unnamed) {
        let ty = program.tensor_type(id);
        let Some(b) = bytes(&ty.shape) else { continue };
        let name = || name.map_or_else(|| format!("%{id}"), str::to_string);
        let what = || shown(&name(), &ty.shape);
        TooLarge::check(what, b, u64::MAX).map_err(too_large)?;
        let what = || format!("{} (with the params and inputs)", shown(&name(), &ty.shape));
        TooLarge::check(what, b.saturating_add(sources), budget).map_err(too_large)?;
    }
    Ok(())
}

/// Whether `p` mentions a loop variable.
fn in_loop(program: &Program, p: &Poly) -> bool {
    p.syms()
        .iter()
        .any(|&s| matches!(program.dims.info(s).kind, DimKind::Loop { .. }))
}

/// E0305 when the memory `plan` holds at once (params, inputs, outputs, the arena of
/// temporaries and the derived buffers) exceeds `budget`.
pub fn plan(plan: &Plan, budget: u64) -> Result<(), RunError> {
    let mut elements = (plan.arena_len as u128) + (plan.derived_len as u128);
    let mut largest: Option<(&str, usize)> = None;
    for b in &plan.buffers {
        if matches!(
            b.kind,
            BufferKind::Param(_) | BufferKind::Input(_) | BufferKind::Output(_) | BufferKind::State { .. }
        ) {
            elements += b.len as u128;
            if largest.is_none_or(|(_, len)| b.len > len) {
                largest = Some((&b.name, b.len));
            }
        }
    }
    let what = || match largest {
        Some((name, len)) => format!("the kernel plan (its largest tensor `{name}` has {len} elements)"),
        None => "the kernel plan".to_string(),
    };
    TooLarge::check(what, elements.saturating_mul(4), budget).map_err(too_large)
}
