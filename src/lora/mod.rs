//! LoRA adapters on a loaded base, unmerged (docs/lora.md): each adapted linear layer computes
//! `W·x + s·B·(A·x)`, the base's quantized kernels untouched and the low-rank product in f32
//! beside them ([`crate::kernels::lora`]). Adapters belong to a sequence, not to the model: a
//! [`State`](crate::model::State) carries its [`AdapterSet`] (adapters and their scales), so a
//! server's continuous batch runs requests with different adapters in one pass, the base's
//! weights read once and each row adding its own adapters.
//!
//! [`Model::attach_adapter`](crate::model::Model::attach_adapter) checks a file's adapter against the base: every target must be a weight
//! of the base with the same shape, and a mismatch is refused naming the module and both
//! shapes.

use crate::kernels::lora::Rows;

use pocket_formats::lora::LoraModule;
use std::borrow::Cow;

use std::sync::Arc;

/// Which linear layer of a decoder layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Target {
    pub const ALL: [Target; 7] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
    ];

    /// The HF name's module part (`self_attn.q_proj`).
    pub fn module(self) -> &'static str {
        match self {
            Target::Q => "self_attn.q_proj",
            Target::K => "self_attn.k_proj",
            Target::V => "self_attn.v_proj",
            Target::O => "self_attn.o_proj",
            Target::Gate => "mlp.gate_proj",
            Target::Up => "mlp.up_proj",
            Target::Down => "mlp.down_proj",
        }
    }
}

/// One adapted weight in the kernel's layout: `A` `[rank, in]` and `Bᵀ` `[rank, out]`.
#[derive(Clone, Debug)]
pub struct LowRank {
    pub rank: usize,
    pub cols: usize,
    pub rows: usize,
    pub a: Factor,
    pub bt: Factor,
    /// The adapter's own scale (alpha / r, …), before the user's.
    pub scale: f32,
}

impl LowRank {
    pub(crate) fn from_module(m: &LoraModule, head_dim: usize) -> LowRank {
        let (r, rows) = (m.rank, m.rows);
        let mut bt = vec![0f32; r * rows];
        for o in 0..rows {
            // A llama q/k GGUF adapter's B rows are in llama.cpp's interleaved order.
            let src = if m.qk_permuted {
                pocket_formats::gguf::model::llama_qk_row(o, head_dim)
            } else {
                o
            };
            for j in 0..r {
                bt[j * rows + o] = m.b[src * r + j];
            }
        }
        LowRank {
            rank: r,
            cols: m.cols,
            rows,
            a: Factor::F32(m.a.clone()),
            bt: Factor::F32(bt),
            scale: m.scale,
        }
    }

    /// Bytes of its factors as kept.
    pub fn bytes(&self) -> usize {
        self.a.bytes() + self.bt.bytes()
    }
}

/// A factor's elements as kept: f32, or f16 beside a layer whose kernels quantize the
/// activations to int8 (a quantized base on the default path). There the f16 rounding (2⁻¹¹
/// relative) is far below the activations' own, and a decode step reads half the bytes: an
/// r-16 adapter on all seven linear layers of the MNN-Pocket shape is 14 MB in f16 against
/// the base's 172 MB. Dense bases and the exact path (`--activations f32`) keep f32, so they
/// equal transformers + peft.
#[derive(Clone, Debug)]
pub enum Factor {
    F32(Vec<f32>),
    F16(Vec<u16>),
}

impl Factor {
    /// The kernels' view.
    pub fn rows(&self) -> Rows<'_> {
        match self {
            Factor::F32(v) => Rows::F32(v),
            Factor::F16(v) => Rows::F16(v),
        }
    }

    /// Element `i` as f32.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Factor::F32(v) => v[i],
            Factor::F16(v) => half::f16::from_bits(v[i]).to_f32(),
        }
    }

    /// The elements as f32 (a copy when kept in f16), for merging.
    pub fn to_f32(&self) -> Cow<'_, [f32]> {
        match self {
            Factor::F32(v) => Cow::Borrowed(v),
            Factor::F16(v) => Cow::Owned(
                v.iter()
                    .map(|&x| half::f16::from_bits(x).to_f32())
                    .collect(),
            ),
        }
    }

    /// Kept in f16 from now on (round to nearest even).
    pub(crate) fn halve(&mut self) {
        if let Factor::F32(v) = self {
            *self = Factor::F16(
                v.iter()
                    .map(|&x| half::f16::from_f32(x).to_bits())
                    .collect(),
            );
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            Factor::F32(v) => v.len() * 4,
            Factor::F16(v) => v.len() * 2,
        }
    }
}

/// An adapter checked against a base and laid out for the kernels.
pub struct Adapter {
    /// The name requests use (`--lora name=PATH`), or the file's stem.
    pub name: String,
    pub path: std::path::PathBuf,
    /// Per decoder layer, per [`Target`] (in [`Target::ALL`]'s order).
    pub layers: Vec<[Option<LowRank>; 7]>,
    /// The embedding's: `A` is `[vocab, rank]` (a token's row), `Bᵀ` `[rank, hidden]`.
    pub embed: Option<LowRank>,
    /// The output head's (`lm_head`; a tied model's head only, not its embedding).
    pub head: Option<LowRank>,
    /// A whole new output head (PEFT's `modules_to_save` with `lm_head`), used instead of the
    /// base's by the sequences that run this adapter.
    pub new_head: Option<crate::weights::Matrix>,
    pub modules: usize,
    pub ranks: Vec<usize>,
    pub source: &'static str,
    pub alpha: f64,
    pub rslora: bool,
}

impl Adapter {
    /// Bytes of the adapter's factors as kept (f16 beside int8 layers, else f32).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .flatten()
            .chain(&self.embed)
            .chain(&self.head)
            .map(LowRank::bytes)
            .sum::<usize>()
            + self.new_head.as_ref().map_or(0, |m| m.stored_bytes())
    }
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Adapter({} from {}, {} modules)",
            self.name,
            self.path.display(),
            self.modules
        )
    }
}

/// The adapters a sequence runs with, each at a user's scale (multiplying its own).
#[derive(Clone, Debug, Default)]
pub struct AdapterSet {
    pub adapters: Vec<(Arc<Adapter>, f32)>,
}

impl AdapterSet {
    /// The output head this set runs with, when an adapter replaces the base's.
    pub fn new_head(&self) -> Option<&crate::weights::Matrix> {
        self.adapters
            .iter()
            .filter(|(_, s)| *s != 0.0)
            .find_map(|(a, _)| a.new_head.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.adapters.iter().all(|(_, s)| *s == 0.0)
    }

    /// A key that two sets share exactly when they compute the same (a prompt cache's key).
    pub fn key(&self) -> String {
        self.adapters
            .iter()
            .filter(|(_, s)| *s != 0.0)
            .map(|(a, s)| format!("{}@{:08x}", a.name, s.to_bits()))
            .collect::<Vec<_>>()
            .join(",")
    }
}
