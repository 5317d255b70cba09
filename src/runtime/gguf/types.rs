//! GGML tensor types: the block layout of every type a GGUF file may declare, and the
//! dequantization to float32 of the ones attnc reads.
//!
//! Knowing every type's block size lets a file be checked whole on open (offsets, sizes,
//! overlaps) even when it holds types attnc cannot dequantize; only reading such a tensor
//! is an error. The formulas follow `gguf.quants` (gguf 0.19), operation for operation in
//! float32, so the values agree bit for bit.

use crate::runtime::files::{bf16_to_f32, f16_to_f32};

/// A GGML tensor type: its id in the file, name, elements per block and bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub bytes: u64,
}

/// Every type `gguf` 0.19 knows (`GGML_QUANT_SIZES`); ids missing here were removed from
/// GGML and are unknown.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 40),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

/// The id of F32, whose tensors need no conversion.
pub const F32: u32 = 0;

/// The types [`dequantize`] reads, for hints.
pub const READ: &str = "F32, F16, BF16, Q8_0, Q4_0 or Q4_1";

impl GgmlType {
    /// The type with file id `id`, if GGML has one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES
            .iter()
            .find(|t| t.0 == id)
            .map(|&(id, name, block, bytes)| GgmlType {
                id,
                name,
                block,
                bytes,
            })
    }

    /// Whether [`dequantize`] reads this type.
    pub fn is_read(self) -> bool {
        matches!(self.id, 0 | 1 | 2 | 3 | 8 | 30)
    }
}

/// The float32 values of `bytes`, whole blocks of `ty`; `None` for a type attnc does not
/// read. The caller has checked that `bytes` is a whole number of blocks.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    let block = ty.bytes as usize;
    let mut out = Vec::with_capacity(bytes.len() / block * ty.block as usize);
    let blocks = bytes.chunks_exact(block);
    match ty.id {
        0 => out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        1 => out.extend(blocks.map(|b| f16_to_f32(half(b, 0)))),
        30 => out.extend(blocks.map(|b| bf16_to_f32(half(b, 0)))),
        8 => blocks.for_each(|b| q8_0(b, &mut out)),
        2 => blocks.for_each(|b| q4_0(b, &mut out)),
        3 => blocks.for_each(|b| q4_1(b, &mut out)),
        _ => return None,
    }
    Some(out)
}

/// The little-endian u16 at `at`.
fn half(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Q8_0: an f16 scale `d`, then 32 signed bytes `q`; `x = d * q`.
fn q8_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_to_f32(half(b, 0));
    out.extend(b[2..34].iter().map(|&q| d * f32::from(q as i8)));
}

/// Q4_0: an f16 scale `d`, then 16 bytes of two 4-bit `q`: the low nibbles are elements
/// 0..16, the high ones 16..32; `x = d * (q - 8)`.
fn q4_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_to_f32(half(b, 0));
    let qs = &b[2..18];
    out.extend(qs.iter().map(|&q| d * (f32::from(q & 0xf) - 8.0)));
    out.extend(qs.iter().map(|&q| d * (f32::from(q >> 4) - 8.0)));
}

/// Q4_1: an f16 scale `d` and minimum `m`, then 16 bytes of nibbles as Q4_0;
/// `x = d * q + m`.
fn q4_1(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_to_f32(half(b, 0));
    let m = f16_to_f32(half(b, 2));
    let qs = &b[4..20];
    out.extend(qs.iter().map(|&q| d * f32::from(q & 0xf) + m));
    out.extend(qs.iter().map(|&q| d * f32::from(q >> 4) + m));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(name: &str) -> GgmlType {
        (0..64)
            .filter_map(GgmlType::from_id)
            .find(|t| t.name == name)
            .unwrap()
    }

    #[test]
    fn q4_blocks_split_nibbles_low_then_high() {
        // d = 1.0 (0x3c00), m = 0.5 (0x3800); byte j holds j in both nibbles' places.
        let mut block = vec![0x00, 0x3c, 0x00, 0x38];
        block.extend((0u8..16).map(|j| j | ((15 - j) << 4)));
        let x = dequantize(ty("Q4_1"), &block).unwrap();
        assert_eq!(x.len(), 32);
        assert_eq!((x[0], x[15], x[16], x[31]), (0.5, 15.5, 15.5, 0.5));
        let x = dequantize(ty("Q4_0"), &[&block[..2], &block[4..]].concat()).unwrap();
        assert_eq!((x[0], x[15], x[16], x[31]), (-8.0, 7.0, 7.0, -8.0));
    }

    #[test]
    fn q8_0_scales_signed_bytes() {
        let mut block = vec![0x00, 0x40]; // d = 2.0
        block.extend((0..32).map(|j: i8| (j - 16) as u8));
        let x = dequantize(ty("Q8_0"), &block).unwrap();
        assert_eq!((x[0], x[16], x[31]), (-32.0, 0.0, 30.0));
    }

    #[test]
    fn only_the_six_types_are_read() {
        let read: Vec<&str> = (0..64)
            .filter_map(GgmlType::from_id)
            .filter(|t| t.is_read())
            .map(|t| t.name)
            .collect();
        assert_eq!(read, ["F32", "F16", "Q4_0", "Q4_1", "Q8_0", "BF16"]);
        assert_eq!(dequantize(ty("Q6_K"), &[0; 210]), None);
        assert_eq!(GgmlType::from_id(4), None);
    }
}
