//! How a packed Q4 matrix's codes and parameters decode ([`Form`]): our own Q4, a GGUF's
//! linear 4-, 5- and 6-bit ggml types, and the non-uniform IQ4_NL/IQ4_XS with their table.

/// How a packed matrix's codes and parameters decode: `(code − offset)·scale + zero`. Our own
/// Q4 is [`Form::POCKET`]; a GGUF's 4-, 5- and 6-bit ggml types are carried in unchanged
/// (`pocket_formats::gguf::codes`) with their own offset, the codes' bits above the nibble in
/// `hi_bits` planes after the code vectors, and f32 parameters where ggml's are f32 products.
///
/// Non-uniform forms (IQ4_NL, IQ4_XS) carry a 16-entry `table`: a weight is
/// `table[code]·scale + zero` and the offset is 0. The kernels look the codes up with one byte
/// shuffle per 16 or 64 weights (`vpshufb`, `tbl`), so the type runs at 4 bits a weight like
/// the linear ones.
///
/// High-bit planes: code bit `4 + p` of the weight whose nibble sits at byte `j` of code
/// vector `i` (half `h`: 0 the high nibble, 1 the low) is bit `b % 8` of byte `j` of plane
/// vector `b / 8`, with `b = p·2·(block/8) + 2i + h`. A block of 32 with one plane (Q5) adds
/// one 64-byte vector, exactly ggml's 4 bytes per row; a block of 16 with two (Q6_K) adds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Form {
    pub offset: u8,
    pub hi_bits: u8,
    /// f32 parameters (16 zeros then 16 scales, or 16 scales) instead of f16.
    pub wide: bool,
    /// The value of each 4-bit code, for non-uniform forms (no high-bit planes, offset 0).
    pub table: Option<[i8; 16]>,
}

impl Form {
    /// `.pocket` Q4: `(q − 8)·s + z`, f16 parameters.
    pub const POCKET: Form = Form {
        offset: 8,
        hi_bits: 0,
        wide: false,
        table: None,
    };

    /// The packed form of a ggml type's codes.
    pub fn of(cf: pocket_formats::gguf::codes::CodeForm) -> Form {
        Form {
            offset: cf.offset,
            hi_bits: cf.bits - 4,
            wide: cf.wide,
            table: cf.table,
        }
    }

    /// The integer a code stands for before the scale multiplies, the offset not yet taken:
    /// the code itself, or its table entry.
    #[inline]
    pub fn int_value(&self, code: u8) -> i32 {
        match &self.table {
            Some(t) => t[(code & 0x0F) as usize] as i32,
            None => code as i32,
        }
    }

    /// The table shifted into unsigned bytes (`table + 128`), for kernels whose integer
    /// product takes unsigned weights (`vpdpbusd`): their sums then carry `128·Σx`, taken back
    /// with the block's offset ([`Form::unsigned_offset`]).
    pub fn unsigned_table(&self) -> Option<[u8; 16]> {
        self.table.map(|t| t.map(|v| (v as i16 + 128) as u8))
    }

    /// The offset of the codes as unsigned-weight kernels read them: 128 for a table (see
    /// [`Form::unsigned_table`]), else the form's own.
    pub fn unsigned_offset(&self) -> f32 {
        if self.table.is_some() {
            128.0
        } else {
            self.offset as f32
        }
    }
}
