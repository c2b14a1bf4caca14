//! MATH-500 as lm-eval 0.4.13's `minerva_math500` runs it: four fixed exemplars
//! (`Problem:\n…\n\nSolution: …`), greedy until "Problem:" (256 tokens, the harness default),
//! the final answer taken from "Final Answer: The final answer is … I hope it is correct.",
//! normalised, and compared with the normalised `\boxed{}` answer of the reference solution
//! ([`normalize`]). `exact_match` here is the reference's string path only: answers equal
//! only after sympy's LaTeX parsing and `simplify` (the reference's fallback), and its second
//! metric `math_verify`, are not ported, so this score is a lower bound of lm-eval's.

pub mod normalize;

use crate::{EvalError, GenRequest, Prompt};
use serde::Deserialize;
use std::path::Path;

const FEWSHOT: &str = include_str!("../../data/math/minerva_fewshot.json");
const MAX_GEN_TOKS: usize = 256;

#[derive(Clone, Debug, Deserialize)]
pub struct Problem {
    pub problem: String,
    pub solution: String,
}

/// `doc_to_text`.
pub fn doc_to_text(problem: &str) -> String {
    format!("Problem:\n{problem}\n\nSolution:")
}

/// The plain-text prompt: each exemplar as question, " ", solution, "\n\n"; then the question.
pub fn prompt(problem: &str) -> Result<String, EvalError> {
    let shots: Vec<Problem> = serde_json::from_str(FEWSHOT)
        .map_err(|e| EvalError::Invalid(format!("minerva_fewshot.json: {e}")))?;
    let mut text = String::new();
    for s in &shots {
        text.push_str(&doc_to_text(&s.problem));
        text.push(' ');
        text.push_str(&s.solution);
        text.push_str("\n\n");
    }
    text.push_str(&doc_to_text(problem));
    Ok(text)
}

pub fn request(problem: &str) -> Result<GenRequest, EvalError> {
    Ok(GenRequest {
        prompt: Prompt::Text(prompt(problem)?),
        until: vec!["Problem:".into()],
        max_gen_toks: MAX_GEN_TOKS,
        sampling: None,
        constraint: None,
    })
}

/// A response's verdict: the extracted and normalised answer, and whether it equals the gold.
pub struct Verdict {
    pub answer: String,
    pub gold: Option<String>,
    pub exact_match: bool,
}

pub fn score(response: &str, solution: &str) -> Verdict {
    let answer = normalize::normalize_final_answer(&normalize::get_unnormalized_answer(response));
    let gold = normalize::gold_answer(solution);
    let exact_match = gold
        .as_deref()
        .is_some_and(|g| normalize::is_equiv_string(&answer, g));
    Verdict {
        answer,
        gold,
        exact_match,
    }
}

/// `{"problem", "solution", ...}` lines (scripts/fetch-eval-data.sh writes MATH-500 so).
pub fn load_problems(path: &Path) -> Result<Vec<Problem>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p: Problem = serde_json::from_str(line).map_err(|e| EvalError::Data {
            path: path.to_path_buf(),
            line: i + 1,
            message: format!("expected {{\"problem\": str, \"solution\": str}}: {e}"),
        })?;
        if normalize::gold_answer(&p.solution).is_none() {
            return Err(EvalError::Data {
                path: path.to_path_buf(),
                line: i + 1,
                message: "the solution has no \\boxed{} answer".into(),
            });
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_answer_sentence_is_scored_against_the_boxed_gold() {
        let solution = "So $x = \\boxed{\\frac{1}{2}}$.";
        let v = score(
            "Thus... Final Answer: The final answer is $\\frac12$. I hope it is correct.",
            solution,
        );
        assert_eq!((v.answer.as_str(), v.exact_match), ("\\frac{1}{2}", true));
        let v = score("The answer is 1/2.", solution);
        assert_eq!(
            (v.answer.as_str(), v.exact_match),
            (normalize::INVALID_ANSWER, false)
        );
        let p = prompt("What is 1+1?").unwrap();
        assert!(p.starts_with("Problem:\nFind the domain"), "{p}");
        assert!(p.ends_with("\n\nProblem:\nWhat is 1+1?\n\nSolution:"));
        assert_eq!(p.matches("Problem:\n").count(), 5);
    }
}
