//! How the checker applies an op's rule from the table: a primitive directly, an op's
//! own rule through the function of the checker the table pairs it with.

use super::ops::is_none;
use super::{Checker, Value};
use crate::ast::Expr;
use crate::ir::{DType, Op};
use crate::ops::table::{apply_own, OpDef, Own, Rule};
use crate::source::Span;

impl Checker {
    /// Runs `def`'s rule on bound arguments. Trailing arguments that are `None` are left
    /// out, so a rule sees an optional operand (a bias) as absent.
    pub(super) fn apply(&mut self, def: &OpDef, args: &[&Expr], span: Span) -> Option<Value> {
        match def.rule {
            Rule::Unary(op) => {
                let x = self.expr(args[0]);
                Some(self.unary(op, &x, args[0].span, span))
            }
            Rule::Binary(op) => {
                let (a, b) = (self.expr(args[0]), self.expr(args[1]));
                let x = self.expect_tensor(&a, args[0].span, "an operand of arithmetic");
                let y = self.expect_tensor(&b, args[1].span, "an operand of arithmetic");
                Some(Value::Tensor(self.elementwise(
                    Op::Binary(op),
                    DType::F32,
                    x?,
                    y?,
                    span,
                )?))
            }
            Rule::Reduce(op) => self.reduction(op, args, span),
            Rule::Check(rule) => {
                let present = args.len() - args.iter().rev().take_while(|e| is_none(e)).count();
                self.own(rule, &args[..present], span)
            }
        }
    }

    /// The function of the checker for each op's own rule, as the table pairs them.
    fn own(&mut self, rule: Own, args: &[&Expr], span: Span) -> Option<Value> {
        apply_own!(self, rule, args, span)
    }
}
