//! Custom tasks: every extraction rule and metric on hand-made answers, task files and data
//! that are wrong in each way a user gets them wrong (one error naming file, line and field),
//! and the prompts built from templates and few-shot rows.

use pocket_evals::custom::extract::{extract, normalize};
use pocket_evals::custom::metric::{score, token_f1};
use pocket_evals::custom::spec::{Extract, Metric, Normalize};
use pocket_evals::custom::CustomTask;
use pocket_evals::{EvalError, Prompt};
use serde_json::json;
use std::path::Path;

fn n() -> Normalize {
    Normalize::default()
}

#[test]
fn extraction_rules() {
    let text = "\n  Weather  \nbecause it asks about rain";
    assert_eq!(
        extract(&Extract::FirstLine, text, &[], &n()).as_deref(),
        Some("Weather")
    );
    assert_eq!(
        extract(&Extract::Whole, " a b \n", &[], &n()).as_deref(),
        Some("a b")
    );
    let re = Extract::Regex(r"answer is (\w+)".into());
    assert_eq!(
        extract(&re, "so the answer is yes.", &[], &n()).as_deref(),
        Some("yes")
    );
    assert_eq!(
        extract(&Extract::Regex(r"\d+".into()), "x 42 y", &[], &n()).as_deref(),
        Some("42")
    );
    assert_eq!(extract(&re, "no match", &[], &n()), None);
    let answer = "Sure! ```json\n{\"a\": {\"b\": [1, {\"c\": \"deep\"}]}, \"n\": 3}\n``` done {";
    let path = Extract::JsonField("a.b.1.c".into());
    assert_eq!(extract(&path, answer, &[], &n()).as_deref(), Some("deep"));
    assert_eq!(
        extract(&Extract::JsonField("n".into()), answer, &[], &n()).as_deref(),
        Some("3")
    );
    assert_eq!(
        extract(&Extract::JsonField("a.x".into()), answer, &[], &n()),
        None
    );
    assert_eq!(
        extract(&Extract::Json, answer, &[], &n()).as_deref(),
        Some(r#"{"a":{"b":[1,{"c":"deep"}]},"n":3}"#)
    );
    assert_eq!(extract(&Extract::Json, "no object {here", &[], &n()), None);
    let labels: Vec<String> = ["urgent", "not urgent", "spam"].map(String::from).to_vec();
    let choose = |t: &str| extract(&Extract::Choices, t, &labels, &n());
    assert_eq!(choose("SPAM").as_deref(), Some("spam"));
    assert_eq!(
        choose("This is not urgent at all").as_deref(),
        Some("not urgent")
    );
    assert_eq!(choose("urgent, maybe spam").as_deref(), Some("urgent"));
    assert_eq!(choose("no idea"), None);
}

#[test]
fn normalisation_options() {
    let all = Normalize {
        lowercase: true,
        strip: true,
        remove_punctuation: true,
        collapse_whitespace: true,
        remove_articles: true,
    };
    assert_eq!(normalize("  The  Answer: Paris! ", &all), "answer paris");
    let none = Normalize {
        lowercase: false,
        strip: false,
        remove_punctuation: false,
        collapse_whitespace: false,
        remove_articles: false,
    };
    assert_eq!(normalize(" The  A ", &none), " The  A ");
}

#[test]
fn metrics() {
    let s = |m, a: Option<&str>, t| score(m, a, t, &n()).scores;
    assert_eq!(
        s(Metric::ExactMatch, Some(" Paris "), "paris"),
        vec![("exact_match".into(), json!(1))]
    );
    assert_eq!(
        s(Metric::ExactMatch, None, "paris"),
        vec![("exact_match".into(), json!(0))]
    );
    assert_eq!(
        s(Metric::Accuracy, Some("spam"), "spam"),
        vec![("accuracy".into(), json!(1))]
    );
    let f = score(
        Metric::TokenF1,
        Some("the cat sat"),
        "the cat sat down",
        &n(),
    );
    assert!((f.f1.unwrap() - 2.0 * 1.0 * 0.75 / 1.75).abs() < 1e-12);
    assert_eq!(
        token_f1("a a b", "a b b"),
        2.0 * (2.0 / 3.0) * (2.0 / 3.0) / (4.0 / 3.0)
    );
    assert_eq!(token_f1("", ""), 1.0);
    assert_eq!(token_f1("x", "y"), 0.0);
    let gold = r#"{"name": "Anna", "n": 3, "tags": ["a"]}"#;
    let got = score(
        Metric::JsonFields,
        Some(r#"{"name": "anna", "n": 3.0, "tags": ["b"]}"#),
        gold,
        &n(),
    );
    assert_eq!(
        got.scores,
        vec![
            ("field_accuracy".into(), json!([true, true, false])),
            ("all_fields".into(), json!(0))
        ]
    );
    let none = score(Metric::JsonFields, None, gold, &n());
    assert_eq!(none.scores[0].1, json!([false, false, false]));
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const ROWS: &str = "{\"q\": \"2+2\", \"a\": \"4\"}\n{\"q\": \"3+3\", \"a\": \"6\"}\n{\"q\": \"1+1\", \"a\": \"2\"}\n";

#[test]
fn prompts_follow_templates_and_fewshot_rows() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "rows.jsonl", ROWS);
    let task = write(
        dir.path(),
        "t.yaml",
        "name: sums\ndata: rows.jsonl\nprompt: \"Q: {{ q }}\\nA:\"\ntarget: '{{ a }}'\nmetric: exact_match\nfewshot: 1\nchat_template: false\n",
    );
    let t = CustomTask::load(&task).unwrap();
    assert_eq!(t.rows.len(), 2);
    let r = t.request(0).unwrap();
    assert_eq!(r.prompt, Prompt::Text("Q: 2+2\nA: 4\n\nQ: 3+3\nA:".into()));
    let chat = write(
        dir.path(),
        "c.json",
        r#"{"name": "sums", "data": "rows.jsonl", "prompt": "{{ q }}?", "target": "{{ a }}", "metric": "exact_match", "fewshot": 1, "system": "Be brief."}"#,
    );
    let t = CustomTask::load(&chat).unwrap();
    let Prompt::Chat(m) = t.request(1).unwrap().prompt else {
        panic!()
    };
    let turns: Vec<(&str, &str)> = m
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            ("system", "Be brief."),
            ("user", "2+2?"),
            ("assistant", "4"),
            ("user", "1+1?")
        ]
    );
    let o = t.score(1, "2\n").unwrap();
    assert_eq!(o.scores.scores["exact_match"], json!(1));
    assert_eq!(o.extra["target"], json!("2"));
}

#[test]
fn bad_task_files_and_rows_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "rows.jsonl", ROWS);
    write(dir.path(), "rows.csv", "q,a\n2+2,4\n\"unclosed,5\n");
    let err = |yaml: &str| {
        let p = write(dir.path(), "bad.yaml", yaml);
        CustomTask::load(&p).err().expect("an error").to_string()
    };
    let base = "name: t\ndata: rows.jsonl\ntarget: '{{ a }}'\nmetric: exact_match\n";
    let e = err(&format!("{base}prompt: '{{{{ question }}}}'\n"));
    assert!(
        e.contains("rows.jsonl:1") && e.contains("`question`") && e.contains("q, a"),
        "{e}"
    );
    let e = err(&format!("{base}prompt: x\ncolour: red\n"));
    assert!(e.contains("bad.yaml") && e.contains("colour"), "{e}");
    let e = err("name: t\ndata: rows.jsonl\nprompt: x\nmetric: exact_match\n");
    assert!(e.contains("bad.yaml") && e.contains("target"), "{e}");
    let e =
        err(&format!("{base}prompt: x\nmetric: accuracy\n").replace("metric: exact_match\n", ""));
    assert!(e.contains("choices"), "{e}");
    let e = err(&format!("{base}prompt: '{{{{ q '\n"));
    assert!(e.contains("bad.yaml") && e.contains("`prompt`"), "{e}");
    let e = err(&format!(
        "{base}prompt: x\nextract:\n  regex: '(unclosed'\n"
    ));
    assert!(e.contains("extract.regex"), "{e}");
    write(
        dir.path(),
        "broken.jsonl",
        "{\"q\": \"1\", \"a\": \"1\"}\n{\"q\": 2,,}\n",
    );
    let e = err(&base
        .replace("rows.jsonl", "broken.jsonl")
        .replace("metric", "prompt: x\nmetric"));
    assert!(e.contains("broken.jsonl:2") && e.contains("JSON"), "{e}");
    let e = err(&base
        .replace("rows.jsonl", "rows.csv")
        .replace("metric", "prompt: x\nmetric"));
    assert!(e.contains("rows.csv:3"), "{e}");
    let e = err(&base
        .replace("rows.jsonl", "missing.jsonl")
        .replace("metric", "prompt: x\nmetric"));
    assert!(e.contains("missing.jsonl"), "{e}");
    let e = err(&format!("{base}prompt: x\nfewshot: 3\n"));
    assert!(
        e.contains("fewshot: 3") && e.contains("none to score"),
        "{e}"
    );
}

/// A directory with the sample rows, a minimal task's YAML for them (`base`, to extend), and a
/// loader of a task file written there as `t.yaml`.
fn yaml_task(
    dir: &Path,
) -> (
    &'static str,
    impl Fn(&str) -> Result<CustomTask, EvalError> + '_,
) {
    write(dir, "rows.jsonl", ROWS);
    let base =
        "name: t\ndata: rows.jsonl\nprompt: '{{ q }}'\ntarget: '{{ a }}'\nmetric: exact_match\n";
    (base, move |yaml: &str| {
        CustomTask::load(&write(dir, "t.yaml", yaml))
    })
}

#[test]
fn constraints_are_read_inline_from_files_and_checked() {
    use pocket_evals::AnswerConstraint;
    let dir = tempfile::tempdir().unwrap();
    let (base, load) = yaml_task(dir.path());
    let constraint = |yaml: &str| load(yaml).unwrap().request(0).unwrap().constraint;
    assert_eq!(constraint(base), None);
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    write(dir.path(), "schema.json", &schema.to_string());
    assert_eq!(
        constraint(&format!(
            "{base}generation:\n  constrain:\n    json_schema: schema.json\n"
        )),
        Some(AnswerConstraint::JsonSchema(schema.clone()))
    );
    assert_eq!(
        constraint(&format!(
            "{base}generation:\n  constrain:\n    json_schema: {{type: object, properties: {{n: {{type: integer}}}}}}\n"
        )),
        Some(AnswerConstraint::JsonSchema(schema))
    );
    assert_eq!(
        constraint(&format!(
            "{base}choices: [yes, no]\ngeneration:\n  constrain: choices\n"
        )),
        Some(AnswerConstraint::Choices(vec!["yes".into(), "no".into()]))
    );
    assert_eq!(
        constraint(&format!(
            "{base}generation:\n  constrain:\n    regex: '[0-9]+'\n"
        )),
        Some(AnswerConstraint::Regex("[0-9]+".into()))
    );
    let err = |yaml: &str| load(yaml).err().expect("an error").to_string();
    let e = err(&format!("{base}generation:\n  constrain: choices\n"));
    assert!(e.contains("t.yaml") && e.contains("needs `choices`"), "{e}");
    let e = err(&format!(
        "{base}generation:\n  constrain:\n    json_schema: nowhere.json\n"
    ));
    assert!(e.contains("nowhere.json"), "{e}");
    write(dir.path(), "broken.json", "{\"type\": \n\"object\",,}");
    let e = err(&format!(
        "{base}generation:\n  constrain:\n    json_schema: broken.json\n"
    ));
    assert!(
        e.contains("broken.json:2") && e.contains("JSON schema"),
        "{e}"
    );
    let e = err(&format!(
        "{base}generation:\n  constrain:\n    xml: '<a/>'\n"
    ));
    assert!(e.contains("t.yaml") && e.contains("`xml`"), "{e}");
    let e = err(&format!("{base}generation:\n  constrain: [1]\n"));
    assert!(e.contains("t.yaml") && e.contains("json_schema"), "{e}");
}

#[test]
fn sampling_settings_are_per_item_repeatable_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let (base, load) = yaml_task(dir.path());
    assert_eq!(load(base).unwrap().request(0).unwrap().sampling, None);
    let task = load(&format!(
        "{base}generation:\n  temperature: 0.7\n  top_p: 0.9\n  seed: 5\n"
    ))
    .unwrap();
    let s0 = task.request(0).unwrap().sampling.expect("sampled");
    let s1 = task.request(1).unwrap().sampling.expect("sampled");
    assert_eq!((s0.temperature, s0.top_p), (0.7, 0.9));
    assert_ne!(s0.seed, s1.seed, "each item draws its own numbers");
    assert_eq!(
        task.request(0).unwrap().sampling,
        Some(s0),
        "the same ones every time"
    );
    let other = load(&format!(
        "{base}generation:\n  temperature: 0.7\n  seed: 6\n"
    ))
    .unwrap();
    let o0 = other.request(0).unwrap().sampling.unwrap();
    assert_ne!(o0.seed, s0.seed);
    assert_eq!(o0.top_p, 1.0);
    let err = |yaml: &str| load(yaml).err().expect("an error").to_string();
    for (g, want) in [
        ("temperature: -1", "`generation.temperature`"),
        ("temperature: .nan", "`generation.temperature`"),
        ("temperature: 1\n  top_p: 0", "`generation.top_p`"),
        ("temperature: 1\n  top_p: 1.5", "`generation.top_p`"),
        ("seed: 3", "need `temperature` above 0"),
        ("top_p: 0.9", "need `temperature` above 0"),
        ("temperature: hot", "temperature"),
    ] {
        let e = err(&format!("{base}generation:\n  {g}\n"));
        assert!(e.contains("t.yaml") && e.contains(want), "{g}: {e}");
    }
}
