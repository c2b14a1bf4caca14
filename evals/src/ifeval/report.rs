//! IFEval's four scores (lm-eval's `prompt_level_{strict,loose}_acc` and
//! `inst_level_{strict,loose}_acc`), a per-instruction breakdown and the verdict of every row.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{IfevalItem, ItemVerdict};
use crate::results::ItemScores;

/// Verdicts of one response row.
#[derive(Clone, Debug, Serialize)]
pub struct RowVerdict {
    pub row: usize,
    pub key: i64,
    pub instruction_ids: Vec<String>,
    pub strict: Vec<bool>,
    pub loose: Vec<bool>,
}

/// How often one instruction id was followed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InstructionStats {
    pub count: usize,
    pub strict_followed: usize,
    pub loose_followed: usize,
    pub strict_acc: f64,
    pub loose_acc: f64,
}

/// The aggregate over all rows. Accuracies are 0 when there is nothing to average.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub rows: usize,
    pub instructions: usize,
    /// Share of rows that follow all their instructions.
    pub prompt_level_strict_acc: f64,
    pub prompt_level_loose_acc: f64,
    /// Share of all instructions (over all rows) that are followed.
    pub inst_level_strict_acc: f64,
    pub inst_level_loose_acc: f64,
    pub per_instruction: BTreeMap<String, InstructionStats>,
    pub verdicts: Vec<RowVerdict>,
}

fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

impl Report {
    /// Aggregates verdicts given in row order.
    pub fn new(scored: &[(&IfevalItem, ItemVerdict)]) -> Report {
        let (mut prompt_strict, mut prompt_loose) = (0, 0);
        let (mut inst, mut inst_strict, mut inst_loose) = (0, 0, 0);
        let mut per_instruction: BTreeMap<String, InstructionStats> = BTreeMap::new();
        let mut verdicts = Vec::with_capacity(scored.len());
        for (row, (item, v)) in scored.iter().enumerate() {
            prompt_strict += usize::from(v.strict.iter().all(|&b| b));
            prompt_loose += usize::from(v.loose.iter().all(|&b| b));
            for ((id, &s), &l) in item.instruction_ids.iter().zip(&v.strict).zip(&v.loose) {
                inst += 1;
                inst_strict += usize::from(s);
                inst_loose += usize::from(l);
                let stats = per_instruction.entry(id.clone()).or_default();
                stats.count += 1;
                stats.strict_followed += usize::from(s);
                stats.loose_followed += usize::from(l);
            }
            verdicts.push(RowVerdict {
                row,
                key: item.key,
                instruction_ids: item.instruction_ids.clone(),
                strict: v.strict.clone(),
                loose: v.loose.clone(),
            });
        }
        for stats in per_instruction.values_mut() {
            stats.strict_acc = ratio(stats.strict_followed, stats.count);
            stats.loose_acc = ratio(stats.loose_followed, stats.count);
        }
        Report {
            rows: scored.len(),
            instructions: inst,
            prompt_level_strict_acc: ratio(prompt_strict, scored.len()),
            prompt_level_loose_acc: ratio(prompt_loose, scored.len()),
            inst_level_strict_acc: ratio(inst_strict, inst),
            inst_level_loose_acc: ratio(inst_loose, inst),
            per_instruction,
            verdicts,
        }
    }
}

fn bits(v: &[bool]) -> serde_json::Value {
    v.iter().map(|&b| u8::from(b)).collect()
}

/// One response's scores in the form reports average and `compare` pairs: the prompt-level
/// scores as 0/1 and the instruction-level ones as one 0/1 per instruction, named by
/// `instruction_ids`.
pub fn item_scores(
    key: i64,
    instruction_ids: &[String],
    strict: &[bool],
    loose: &[bool],
) -> ItemScores {
    let all = |b: &[bool]| serde_json::Value::from(u8::from(b.iter().all(|&x| x)));
    ItemScores {
        id: serde_json::Value::from(key),
        scores: [
            ("prompt_level_strict_acc", all(strict)),
            ("prompt_level_loose_acc", all(loose)),
            ("inst_level_strict_acc", bits(strict)),
            ("inst_level_loose_acc", bits(loose)),
        ]
        .into_iter()
        .map(|(k, s)| (k.to_string(), s))
        .collect(),
        instruction_id_list: Some(instruction_ids.to_vec()),
    }
}
