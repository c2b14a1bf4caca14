//! The IFEval API: loading inputs (both kwargs styles), refusing items whose verdicts the
//! reference would leave to chance, strict versus loose scoring, and the aggregate report.
//! Expected verdicts were taken from the Python reference (scripts/ifeval_reference.py).

use std::path::Path;

use pocket_evals::ifeval::{self, IfevalItem, ResponseRow};
use pocket_evals::EvalError;

fn items(lines: &[&str]) -> Result<Vec<IfevalItem>, EvalError> {
    ifeval::parse_inputs(&lines.join("\n"), Path::new("inline.jsonl"))
}

fn one(ids: &str, kwargs: &str) -> IfevalItem {
    let line =
        format!(r#"{{"key": 7, "prompt": "p", "instruction_id_list": {ids}, "kwargs": {kwargs}}}"#);
    items(&[&line]).expect("item builds").remove(0)
}

#[test]
fn strict_and_loose_differ_where_the_reference_does() {
    let item = one(
        r#"["startend:quotation", "punctuation:no_comma"]"#,
        "[{}, {}]",
    );
    let v = ifeval::score_response(&item, "Here you go:\n\"quoted, text\"");
    assert_eq!(v.strict, [false, false]);
    assert_eq!(v.loose, [true, true]);

    let item = one(
        r#"["length_constraints:number_sentences", "change_case:capital_word_frequency"]"#,
        r#"[{"num_sentences": 2, "relation": "less than"}, {"capital_frequency": 3, "capital_relation": "at least"}]"#,
    );
    let v = ifeval::score_response(
        &item,
        "Dr. Smith arrived at 5 p.m. on Jan. 3. He left. NASA and the U.S.A. CANNOT agree.",
    );
    assert_eq!(v.strict, [false, true]);
}

#[test]
fn hugging_face_kwargs_with_nulls_load() {
    let item = one(
        r#"["detectable_format:title", "detectable_format:number_bullet_lists"]"#,
        r#"[{"num_highlights": null, "relation": null}, {"num_bullets": 2, "keywords": null}]"#,
    );
    let v = ifeval::score_response(&item, "<<T>>\n* a\n* b\n**end**");
    assert_eq!(v.strict, [true, true]);
}

#[test]
fn items_the_reference_would_randomise_are_refused() {
    let cases = [
        (
            r#"["keywords:frequency"]"#,
            r#"[{"keyword": "the", "frequency": 3}]"#,
            "relation",
        ),
        (
            r#"["length_constraints:number_words"]"#,
            r#"[{"num_words": -1, "relation": "at least"}]"#,
            "negative",
        ),
        (
            r#"["length_constraints:nth_paragraph_first_word"]"#,
            r#"[{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}]"#,
            "out of range",
        ),
        (
            r#"["detectable_format:title"]"#,
            r#"[{"unexpected": 1}]"#,
            "unexpected argument",
        ),
        (
            r#"["keywords:no_such_check"]"#,
            "[{}]",
            "unknown instruction",
        ),
        (
            r#"["punctuation:no_comma", "detectable_format:title"]"#,
            "[{}]",
            "fewer kwargs",
        ),
    ];
    for (ids, kwargs, why) in cases {
        let line = format!(
            r#"{{"key": 1, "prompt": "p", "instruction_id_list": {ids}, "kwargs": {kwargs}}}"#
        );
        let err = items(&[&line]).expect_err(ids).to_string();
        assert!(
            err.contains(why) && err.starts_with("inline.jsonl:1:"),
            "{err}"
        );
    }
}

#[test]
fn a_letter_that_is_not_a_letter_is_counted_as_given() {
    let item = one(
        r#"["keywords:letter_frequency"]"#,
        r#"[{"letter": "!", "let_frequency": 2, "let_relation": "at least"}]"#,
    );
    assert_eq!(ifeval::score_response(&item, "Wow! Yes!").strict, [true]);
    assert_eq!(ifeval::score_response(&item, "Wow! Yes.").strict, [false]);
}

#[test]
fn report_aggregates_rows_separately() {
    let inputs = items(&[
        r#"{"key": 1, "prompt": "first", "instruction_id_list": ["punctuation:no_comma", "startend:quotation"], "kwargs": [{}, {}]}"#,
        r#"{"key": 2, "prompt": "second", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}"#,
    ])
    .expect("inputs build");
    let row = |key: Option<i64>, prompt: Option<&str>, response: &str| ResponseRow {
        key,
        prompt: prompt.map(str::to_owned),
        response: response.to_owned(),
    };
    let rows = [
        row(Some(1), None, "\"no commas\""),
        row(None, Some("first"), "a, b"),
        row(Some(2), None, "fine"),
        row(Some(2), None, "   "),
    ];
    let report = ifeval::score_rows(&inputs, &rows).expect("rows score");
    assert_eq!(report.rows, 4);
    assert_eq!(report.instructions, 6);
    assert_eq!(report.prompt_level_strict_acc, 0.5);
    assert_eq!(report.inst_level_strict_acc, 3.0 / 6.0);
    let no_comma = &report.per_instruction["punctuation:no_comma"];
    assert_eq!((no_comma.count, no_comma.strict_followed), (4, 2));
    assert_eq!(report.verdicts[1].key, 1);
    assert_eq!(
        report.verdicts[3].strict,
        [false],
        "an all-whitespace response follows nothing"
    );

    let unknown = [row(Some(99), None, "x")];
    assert!(ifeval::score_rows(&inputs, &unknown).is_err());
}

#[test]
fn score_file_reads_both_files() {
    let dir = std::env::temp_dir().join(format!("pocket-ifeval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let inputs = dir.join("inputs.jsonl");
    let responses = dir.join("responses.jsonl");
    std::fs::write(
        &inputs,
        r#"{"key": 5, "prompt": "Say hi", "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]}"#,
    )
    .expect("write inputs");
    std::fs::write(
        &responses,
        "{\"key\": 5, \"response\": \"hello there, how are you today?\"}\n",
    )
    .expect("write responses");
    let report = ifeval::score_file(&inputs, &responses).expect("scores");
    assert_eq!(report.verdicts[0].strict, [true]);
    let json = serde_json::to_value(&report).expect("serializes");
    assert_eq!(json["prompt_level_loose_acc"], 1.0);

    std::fs::write(&responses, "{\"key\": 5}\n").expect("write responses");
    let err = ifeval::score_file(&inputs, &responses)
        .expect_err("missing response")
        .to_string();
    assert!(err.contains("responses.jsonl:1:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keywords, markers and splitters with regex syntax take the `regex` crate path (documented
/// as close to Python, not guaranteed equal); these simple ones agree with the reference.
#[test]
fn regex_syntax_arguments_behave_like_python_on_simple_patterns() {
    let item = one(
        r#"["keywords:existence", "keywords:forbidden_words"]"#,
        r#"[{"keywords": ["colou?r"]}, {"forbidden_words": ["ca.t"]}]"#,
    );
    assert_eq!(
        ifeval::score_response(&item, "COLOR of the cart").strict,
        [true, false]
    );

    let marker = |m: &str, text: &str| {
        let kwargs = format!(r#"[{{"postscript_marker": "{m}"}}]"#);
        let item = one(r#"["detectable_content:postscript"]"#, &kwargs);
        ifeval::score_response(&item, text).strict[0]
    };
    assert!(marker("P.S", "Hello\np-s later"));
    assert!(marker("Note:", "Hello\n NOTE: later"));

    let item = one(
        r#"["detectable_format:multiple_sections", "keywords:letter_frequency"]"#,
        concat!(
            r#"[{"section_spliter": " Part ", "num_sections": 2}, "#,
            r#"{"letter": "A", "let_frequency": 3, "let_relation": "less than"}]"#
        ),
    );
    assert_eq!(
        ifeval::score_response(&item, "Part 1 a Part2 banana").strict,
        [true, false]
    );
}
