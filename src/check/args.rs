//! Binding a call's arguments to an op's parameters, as Python binds them.

use super::Checker;
use crate::ast::{Expr, ExprKind, Kwarg};
use crate::diagnostic::Code;
use crate::ops::table::{Default, OpDef};
use crate::source::Span;

impl Checker {
    /// One expression per parameter of `def` (its default, spanning the call, where the
    /// call leaves it out), then the variadic tail. E0206 for too many or too few
    /// arguments, an unknown or repeated keyword, or a parameter given twice.
    pub(super) fn bind_args(
        &mut self,
        def: &OpDef,
        args: &[&Expr],
        kwargs: &[Kwarg],
        span: Span,
    ) -> Option<Vec<Expr>> {
        let variadic = def.params.iter().position(|p| p.default == Default::Variadic);
        let fixed = variadic.unwrap_or(def.params.len());
        if variadic.is_none() && args.len() > fixed {
            let msg = format!(
                "`{}` takes at most {fixed} arguments, found {}",
                def.signature(),
                args.len()
            );
            self.error(Code::E0206, span, msg);
            return None;
        }
        let mut bound: Vec<Option<Expr>> = vec![None; fixed];
        for (slot, arg) in bound.iter_mut().zip(args) {
            *slot = Some((*arg).clone());
        }
        for k in kwargs {
            let name = k.name.name.as_str();
            let Some(i) = def.params[..fixed].iter().position(|p| p.name == name) else {
                let msg = format!("`{}` has no parameter `{name}`", def.signature());
                self.error(Code::E0206, k.name.span, msg);
                return None;
            };
            if bound[i].is_some() {
                let how = match i < args.len() {
                    true => "also given positionally",
                    false => "given twice",
                };
                self.error(Code::E0206, k.name.span, format!("argument `{name}` is {how}"));
                return None;
            }
            bound[i] = Some(k.value.clone());
        }
        let mut out = Vec::with_capacity(bound.len());
        for (param, arg) in def.params.iter().zip(bound) {
            let value = match (arg, param.default) {
                (Some(e), _) => e,
                (None, Default::Required) => {
                    let msg = format!("`{}` is missing its argument `{}`", def.signature(), param.name);
                    self.error(Code::E0206, span, msg);
                    return None;
                }
                (None, default) => default_expr(default, span),
            };
            out.push(value);
        }
        out.extend(args.iter().skip(fixed).map(|e| (*e).clone()));
        Some(out)
    }
}

/// A default as the expression a user would have written.
fn default_expr(default: Default, span: Span) -> Expr {
    let kind = match default {
        Default::Required | Default::Variadic | Default::None => ExprKind::NoneLit,
        Default::Bool(b) => ExprKind::Bool(b),
        Default::Int(n) if n < 0 => ExprKind::Neg(Box::new(Expr {
            kind: ExprKind::Int(n.unsigned_abs()),
            span,
        })),
        Default::Int(n) => ExprKind::Int(n as u64),
        Default::Float(x) => ExprKind::Float(x),
        Default::Str(s) => ExprKind::Str(s.to_string()),
    };
    Expr { kind, span }
}
