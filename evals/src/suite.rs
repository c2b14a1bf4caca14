//! The model card's benchmark suite as one list: which tasks pocket runs, under which task
//! name and headline metric, and which it cannot (no data reachable here).
//! The card (MNN-Pocket-0.3B) reports an unweighted average over 11 benchmarks, naming IFEval,
//! IFEval-zh, GSM8K, HumanEval, C-Eval, CMMLU and MATH500.

/// Whether a suite row can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Runs as `task` (a `pocket eval --tasks` name), scored by `metric`.
    Runs {
        task: &'static str,
        metric: &'static str,
    },
    /// No copy of the data is reachable here (C-Eval and CMMLU run from a user's file with
    /// `pocket eval mc`).
    NoData,
}

#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// The benchmark's name as the card or the literature writes it.
    pub name: &'static str,
    pub status: Status,
    /// On the card's named list.
    pub card: bool,
}

const fn runs(name: &'static str, task: &'static str, metric: &'static str, card: bool) -> Row {
    Row {
        name,
        status: Status::Runs { task, metric },
        card,
    }
}

const fn other(name: &'static str, status: Status, card: bool) -> Row {
    Row { name, status, card }
}

/// Every row, card rows first. Headline metrics: IFEval prompt-level strict, GSM8K chain of
/// thought with the flexible (last number) extraction, HumanEval through the chat template,
/// MMLU `acc` and the other multiple-choice sets `acc_norm` (the figures lm-eval reports).
pub const ROWS: &[Row] = &[
    runs("IFEval", "ifeval", "prompt_level_strict_acc", true),
    other("IFEval-zh", Status::NoData, true),
    runs("GSM8K", "gsm8k_cot", "flexible_extract", true),
    runs("HumanEval", "humaneval_instruct", "passed", true),
    other("C-Eval", Status::NoData, true),
    other("CMMLU", Status::NoData, true),
    runs("MATH500", "math500", "exact_match", true),
    runs("MBPP", "mbpp", "passed", false),
    runs("MMLU", "mmlu", "acc", false),
    runs("ARC-Challenge", "arc_challenge", "acc_norm", false),
    runs("HellaSwag", "hellaswag", "acc_norm", false),
    runs("GPQA Diamond", "gpqa", "acc_norm", false),
    runs("BBH", "bbh", "exact_match", false),
];

/// A vendor's published averages, printed beside ours and marked as theirs.
pub struct Card {
    pub name: &'static str,
    pub benchmarks: usize,
    /// (build, average in points).
    pub averages: &'static [(&'static str, f64)],
}

pub const CARDS: &[Card] = &[Card {
    name: "mnn-pocket",
    benchmarks: 11,
    averages: &[("full precision", 50.00), ("INT4", 49.59)],
}];

/// The rows for `--tasks card`, `all`, or a comma list of row names or task names.
pub fn select(spec: &str) -> Result<Vec<Row>, String> {
    match spec {
        "card" => Ok(ROWS.iter().copied().filter(|r| r.card).collect()),
        "all" => Ok(ROWS.to_vec()),
        list => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|want| {
                ROWS.iter()
                    .copied()
                    .find(|r| {
                        r.name.eq_ignore_ascii_case(want)
                            || matches!(r.status, Status::Runs { task, .. } if task == want)
                    })
                    .ok_or_else(|| {
                        let names: Vec<&str> = ROWS.iter().map(|r| r.name).collect();
                        format!(
                            "unknown task `{want}` (card, all, or some of: {})",
                            names.join(", ")
                        )
                    })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_names_seven_rows() {
        let card = select("card").unwrap();
        assert_eq!(card.len(), 7);
        assert_eq!(select("all").unwrap().len(), ROWS.len());
        let two = select("humaneval_instruct, GSM8K").unwrap();
        assert_eq!((two[0].name, two[1].name), ("HumanEval", "GSM8K"));
        assert!(select("nope").unwrap_err().contains("unknown task `nope`"));
    }
}
