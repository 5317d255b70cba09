//! How the checker applies an op's rule from the table: a primitive directly, an op's
//! own rule through the function of the checker that checks and builds it.

use super::ops::is_none;
use super::{Checker, Value};
use crate::ast::Expr;
use crate::ir::{DType, Op};
use crate::ops::table::{OpDef, Own, Rule};
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

    /// The function of the checker for each op's own rule.
    fn own(&mut self, rule: Own, args: &[&Expr], span: Span) -> Option<Value> {
        match rule {
            Own::Linear => self.linear(args, span),
            Own::Matmul => self.matmul_op(args, span),
            Own::Transpose => self.transpose(args, span),
            Own::Permute => self.permute(args, span),
            Own::View => self.view_op(args, span),
            Own::Reshape => self.reshape_op(args, span),
            Own::Contiguous => self.contiguous(args, span),
            Own::Expand => self.expand(args, span),
            Own::Flatten => self.flatten(args, span),
            Own::RepeatInterleave => self.repeat_interleave(args, span),
            Own::Unsqueeze => self.unsqueeze(args, span),
            Own::Squeeze => self.squeeze(args, span),
            Own::Concat => self.concat(args, span),
            Own::Stack => self.stack(args, span),
            Own::MaskedFill => self.masked_fill(args, span),
            Own::ScaledDotProductAttention => self.scaled_dot_product_attention(args, span),
            Own::IndexCopy => self.index_copy(args, span),
            Own::IndexCopyInPlace => self.index_copy_(args, span),
            Own::Embedding => self.embedding(args, span),
            Own::Float => self.float_cast(args, span),
            Own::Long => self.long_cast(args, span),
            Own::Bool => self.bool_cast(args, span),
            Own::To => self.convert_to(args, span),
            Own::TypeAs => self.type_as(args, span),
            Own::Normalize => self.normalize(args, span),
            Own::Dropout => self.dropout(args, span),
            Own::Relu => self.relu(args, span),
            Own::Silu => self.silu(args, span),
            Own::Gelu => self.gelu(args, span),
            Own::Clamp => self.clamp(args, span),
            Own::Where => self.where_op(args, span),
            Own::Size => self.size(args, span),
            Own::Ones => self.ones(args, span),
            Own::Zeros => self.zeros(args, span),
            Own::Full => self.full(args, span),
            Own::Arange => self.arange(args, span),
            Own::Tril => self.tril(args, span),
            Own::Triu => self.triu(args, span),
            Own::Split => self.split(args, span),
            Own::Chunk => self.chunk(args, span),
            Own::Mean => self.mean(args, span),
            Own::Var => self.var(args, span),
            Own::Std => self.std(args, span),
            Own::Softmax => self.softmax(args, span),
            Own::LogSoftmax => self.log_softmax(args, span),
            Own::LayerNorm => self.layer_norm(args, span),
            Own::RmsNorm => self.rms_norm(args, span),
        }
    }
}
