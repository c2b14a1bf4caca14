//! MNN's `Net` for a llama/qwen2/qwen3 decoder, written op by op as MNN 3.6.1's own exporter
//! leaves it after its transformer fusion (docs/mnn-format.md): hidden states stay in MNN's
//! NC4HW4 layout from the first norm to the head; linear layers are 1×1 int4 Convolutions;
//! RoPE (with Qwen3's q/k norms inside), Attention (which owns the KV cache), residual-add +
//! RMSNorm and SiLU·mul are MNN's fused ops.

use super::fb::{Table, Val};

/// `OpType` numbers (schema/current/MNN_generated.h, MNN 3.6.1).
pub mod op {
    pub const BINARY: i32 = 7;
    pub const CAST: i32 = 9;
    pub const CONCAT: i32 = 10;
    pub const CONST: i32 = 11;
    pub const CONVOLUTION: i32 = 12;
    pub const INPUT: i32 = 34;
    pub const RESHAPE: i32 = 73;
    pub const STRIDED_SLICE: i32 = 91;
    pub const UNARY: i32 = 101;
    pub const CONVERT_TENSOR: i32 = 129;
    pub const ATTENTION: i32 = 299;
    pub const ROPE: i32 = 306;
    pub const LAYER_NORM: i32 = 603;
}

/// `OpParameter` union tags.
pub mod param {
    pub const AXIS: u8 = 4;
    pub const BINARY: u8 = 6;
    pub const BLOB: u8 = 7;
    pub const CAST: u8 = 8;
    pub const CONV2D: u8 = 9;
    pub const INPUT: u8 = 21;
    pub const RESHAPE: u8 = 55;
    pub const STRIDED_SLICE: u8 = 65;
    pub const CONVERT: u8 = 66;
    pub const UNARY: u8 = 70;
    pub const LAYER_NORM: u8 = 88;
    pub const ATTENTION: u8 = 98;
    pub const ROPE: u8 = 102;
}

/// `MNN_DATA_FORMAT`.
pub const NCHW: i8 = 0;
pub const NHWC: i8 = 1;
pub const NC4HW4: i8 = 2;
/// `DataType`.
pub const DT_FLOAT: i32 = 1;
pub const DT_INT32: i32 = 3;
/// `BinaryOpOperation` / `UnaryOpOperation`.
pub const BIN_ADD: i32 = 0;
pub const BIN_MUL: i32 = 2;
pub const BIN_MUL_SILU: i32 = 29;
pub const UN_SIN: i32 = 9;
pub const UN_COS: i32 = 10;

/// The graph under construction: tensor names (their index is their id) and ops in order.
#[derive(Default)]
pub struct Graph {
    pub names: Vec<String>,
    index: std::collections::HashMap<String, i32>,
    pub ops: Vec<Table>,
}

impl Graph {
    fn tensor(&mut self, name: &str) -> i32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as i32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    /// Appends an op reading `ins` and writing `outs` (tensor names).
    pub fn op(
        &mut self,
        ty: i32,
        name: &str,
        ins: &[&str],
        outs: &[&str],
        main: Option<(u8, Table)>,
        format: i8,
    ) {
        let ins: Vec<i32> = ins.iter().map(|n| self.tensor(n)).collect();
        let outs: Vec<i32> = outs.iter().map(|n| self.tensor(n)).collect();
        let mut t = Table::new().with(0, Val::I32s(ins));
        if let Some((tag, p)) = main {
            t = t.with(1, Val::U8(tag)).with(2, Val::Table(p));
        }
        t = t
            .with(3, Val::Str(name.into()))
            .with(4, Val::I32s(outs))
            .with(5, Val::I32(ty))
            .with(6, Val::I8(format));
        self.ops.push(t);
    }

    /// The finished `Net`: every op, the tensor names, `logits` (and `hidden_states`) out.
    pub fn net(self, outputs: &[&str]) -> Table {
        Table::new()
            .with(0, Val::Str("pocket".into()))
            .with(
                2,
                Val::Table(Table::new().with(2, Val::Str("3.6.1".into()))),
            )
            .with(3, Val::Tables(self.ops))
            .with(
                4,
                Val::Strs(outputs.iter().map(|s| s.to_string()).collect()),
            )
            .with(5, Val::I8(0))
            // NetSource ONNX, as MNN's exporter leaves it.
            .with(6, Val::I8(3))
            .with(7, Val::Strs(self.names))
            .with(9, Val::I8(0))
    }
}

pub fn input(dims: &[i32], dtype: i32) -> (u8, Table) {
    (
        param::INPUT,
        Table::new()
            .with(0, Val::I32s(dims.to_vec()))
            .with(1, Val::I32(dtype))
            .with(2, Val::I8(NCHW)),
    )
}

pub fn const_i32(dims: &[i32], v: &[i32]) -> (u8, Table) {
    (
        param::BLOB,
        Table::new()
            .with(0, Val::I32s(dims.to_vec()))
            .with(1, Val::I8(NCHW))
            .with(2, Val::I32(DT_INT32))
            .with(5, Val::I32s(v.to_vec())),
    )
}

pub fn const_f32(v: &[f32]) -> (u8, Table) {
    (
        param::BLOB,
        Table::new()
            .with(0, Val::I32s(vec![v.len() as i32]))
            .with(1, Val::I8(NCHW))
            .with(2, Val::I32(DT_FLOAT))
            .with(7, Val::F32s(v.to_vec())),
    )
}

pub fn reshape(dims: Option<&[i32]>) -> (u8, Table) {
    let mut t = Table::new();
    if let Some(d) = dims {
        t = t.with(0, Val::I32s(d.to_vec()));
    }
    (param::RESHAPE, t.with(1, Val::I8(NCHW)))
}

pub fn convert(from: i8, to: i8) -> (u8, Table) {
    (
        param::CONVERT,
        Table::new().with(0, Val::I8(from)).with(1, Val::I8(to)),
    )
}

pub fn cast_to_float() -> (u8, Table) {
    (
        param::CAST,
        Table::new()
            .with(0, Val::I32(DT_INT32))
            .with(1, Val::I32(DT_FLOAT)),
    )
}

pub fn binary(op: i32) -> (u8, Table) {
    (
        param::BINARY,
        Table::new()
            .with(0, Val::I32(op))
            .with(1, Val::I32(DT_FLOAT))
            .with(2, Val::I32(0)),
    )
}

pub fn unary(op: i32) -> (u8, Table) {
    (
        param::UNARY,
        Table::new()
            .with(0, Val::I32(op))
            .with(1, Val::I32(DT_FLOAT)),
    )
}

pub fn axis(a: i32) -> (u8, Table) {
    (param::AXIS, Table::new().with(0, Val::I32(a)))
}

/// ONNX-style Slice (inputs: data, starts, ends, axes, steps).
pub fn onnx_slice() -> (u8, Table) {
    let mut t = Table::new();
    for id in 0..7 {
        t = t.with(id, Val::I32(0));
    }
    (param::STRIDED_SLICE, t.with(7, Val::I32(1)))
}

/// RMSNorm whose f32 weight (and a zero beta, as MNN's exporter writes) is external.
pub fn rms_norm_external(eps: f32, external: Vec<i64>) -> (u8, Table) {
    (
        param::LAYER_NORM,
        Table::new()
            .with(0, Val::I32s(vec![-1]))
            .with(1, Val::F32(eps))
            .with(4, Val::I32(1))
            .with(5, Val::I64s(external))
            .with(6, Val::Bool(true)),
    )
}

/// RMSNorm with its weight inline (Qwen3's per-head q/k norms inside the RoPE op).
pub fn rms_norm_inline(eps: f32, gamma: &[f32]) -> Table {
    Table::new()
        .with(0, Val::I32s(vec![-1]))
        .with(1, Val::F32(eps))
        .with(2, Val::F32s(gamma.to_vec()))
        .with(4, Val::I32(1))
        .with(6, Val::Bool(true))
}

/// A 1×1 Convolution over int4 weights (asymmetric pairs or symmetric scales) in the
/// external file.
pub fn conv_int4(lin: &super::Linear, external: Vec<i64>) -> (u8, Table) {
    let (oc, ic) = (lin.rows, lin.cols);
    let common = Table::new()
        .with(0, Val::I32(0))
        .with(1, Val::I32(0))
        .with(2, Val::I32(1))
        .with(3, Val::I32(1))
        .with(4, Val::I32(1))
        .with(5, Val::I32(1))
        .with(6, Val::I32(1))
        .with(7, Val::I32(1))
        .with(8, Val::I8(0))
        .with(9, Val::I32(1))
        .with(10, Val::I32(oc as i32))
        .with(11, Val::I32(ic as i32))
        .with(12, Val::Bool(false))
        .with(13, Val::Bool(false))
        .with(16, Val::Bool(false));
    let quan = Table::new()
        .with(2, Val::I32(1))
        .with(3, Val::Bool(false))
        .with(4, Val::F32(1.0))
        .with(5, Val::F32(0.0))
        .with(6, Val::F32(0.0))
        .with(7, Val::I32(4))
        // aMin 1 and a non-zero readType (the number of pairs) mean asymmetric blocks.
        .with(8, Val::I32(if lin.sym { 0 } else { 1 }))
        .with(
            9,
            Val::I32(if lin.sym {
                0
            } else {
                (oc * (ic / lin.block)) as i32
            }),
        )
        .with(10, Val::Bool(false))
        .with(11, Val::Bool(super::blob::shape_i32(oc, ic)))
        .with(12, Val::I32(0))
        // ScaleStorageType FP16.
        .with(15, Val::I8(1));
    (
        param::CONV2D,
        Table::new()
            .with(0, Val::Table(common))
            .with(3, Val::Table(quan))
            .with(6, Val::I64s(external)),
    )
}

pub fn rope(
    rot_dim: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    qk_norm: Option<(Table, Table)>,
) -> (u8, Table) {
    let mut t = Table::new()
        .with(0, Val::I32(rot_dim as i32))
        .with(1, Val::I32(heads as i32))
        .with(2, Val::I32(kv_heads as i32))
        .with(3, Val::I32(head_dim as i32));
    if let Some((q, k)) = qk_norm {
        t = t.with(4, Val::Table(q)).with(5, Val::Table(k));
    }
    (param::ROPE, t)
}

pub fn attention(layer: usize) -> (u8, Table) {
    (
        param::ATTENTION,
        Table::new()
            .with(0, Val::Bool(true))
            .with(2, Val::I32(layer as i32))
            .with(3, Val::I32(-1))
            .with(5, Val::Bool(true))
            .with(6, Val::F32(0.0)),
    )
}
