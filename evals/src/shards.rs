//! A task's items split into parts that run apart (`pocket eval TASK … --shard K/N`, one
//! machine or worker each) and the parts' results logs joined back into the one run they make
//! (`pocket eval merge`).
//!
//! Item i of a run (counted in the data's order, after `--limit`) belongs to part i mod N + 1.
//! Round robin rather than blocks, so every part gets the same mix of long and short items
//! (BBH's tasks and MMLU's subjects come one after another and differ severalfold in cost).
//! A part writes each item's place in the whole run into its record, so the merge can put the
//! items back in the one run's order and prove that none is missing or doubled: a report
//! averaged in that order is bit for bit the one run's (the standard error's sum of squares
//! depends on the order of its terms).

use crate::results::{summarize, ItemScores, RunReport};
use crate::runlog::Logged;
use crate::EvalError;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The record key a part's log adds to each item: `{"part": "K/N", "index": i, "of": T,
/// "run": [identity keys]}`. The merged log leaves it out, so it is a one run's log.
pub const KEY: &str = "shard";

/// Part K (1-based) of N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl Shard {
    /// `K/N` with 1 ≤ K ≤ N.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected K/N, e.g. 1/4"))?;
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{s:?}: {t:?} is not a whole number (expected K/N, e.g. 1/4)"))
        };
        let (k, n) = (num(k)?, num(n)?);
        if n == 0 || k == 0 || k > n {
            return Err(format!(
                "{s:?}: K must be 1 to N (parts are numbered 1/{n} … {n}/{n})",
                n = n.max(1)
            ));
        }
        Ok(Shard { k, n })
    }

    /// Whether item `i` of the whole run is this part's.
    pub fn owns(&self, i: usize) -> bool {
        i % self.n == self.k - 1
    }

    /// This part's items, in order.
    pub fn pick<T>(&self, items: Vec<T>) -> Vec<T> {
        items
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.owns(*i))
            .map(|(_, t)| t)
            .collect()
    }

    /// The place in the whole run of this part's `j`-th item.
    pub fn whole_index(&self, j: usize) -> usize {
        self.k - 1 + self.n * j
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// A part as its log records it: the shard, the whole run's item count, and how many logged
/// items each unit of the split has (a code task's samples per problem: a problem's samples
/// stay in one part, so pass@k needs no other part's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub shard: Shard,
    /// Logged items in the whole run.
    pub items: usize,
    pub per: usize,
}

impl Part {
    /// `units` is the whole run's count of what was split (problems, questions, rows).
    pub fn new(shard: Shard, units: usize, per: usize) -> Part {
        let per = per.max(1);
        Part {
            shard,
            items: units * per,
            per,
        }
    }

    /// The place in the whole run of the part's item at `pos` (its place in the part).
    pub fn index(&self, pos: usize) -> usize {
        self.shard.whole_index(pos / self.per) * self.per + pos % self.per
    }

    /// The value of [`KEY`] in the record of the item at `pos`.
    pub fn tag(&self, pos: usize, identity: &Map<String, Value>) -> Value {
        json!({
            "part": self.shard.to_string(),
            "index": self.index(pos),
            "of": self.items,
            "run": identity.keys().collect::<Vec<_>>(),
        })
    }
}

/// The parts joined: the one run's records in its order (without [`KEY`]) and its report.
#[derive(Debug)]
pub struct Merged {
    pub records: Vec<Map<String, Value>>,
    pub report: RunReport,
    pub parts: usize,
}

/// A record's place, for error messages.
struct At<'a> {
    path: &'a Path,
    line: usize,
}

impl At<'_> {
    fn err(&self, message: String) -> EvalError {
        EvalError::Data {
            path: self.path.to_owned(),
            line: self.line,
            message,
        }
    }
}

#[derive(Clone)]
struct Tag {
    shard: Shard,
    index: usize,
    of: usize,
    run: Vec<String>,
}

fn read_tag(record: &Map<String, Value>, at: &At) -> Result<Tag, EvalError> {
    let not_part =
        || at.err("not a part's record (no \"shard\" field: write parts with --shard K/N)".into());
    let t = record
        .get(KEY)
        .and_then(Value::as_object)
        .ok_or_else(not_part)?;
    let shard = t
        .get("part")
        .and_then(Value::as_str)
        .ok_or_else(not_part)
        .and_then(|s| Shard::parse(s).map_err(|e| at.err(format!("shard.part {e}"))))?;
    let count = |key: &str| {
        t.get(key)
            .and_then(Value::as_u64)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| at.err(format!("shard.{key} is not a whole number")))
    };
    let (index, of) = (count("index")?, count("of")?);
    if index >= of {
        return Err(at.err(format!("shard.index {index} is past the run's {of} items")));
    }
    let run = t
        .get("run")
        .and_then(Value::as_array)
        .and_then(|keys| {
            keys.iter()
                .map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .ok_or_else(|| at.err("shard.run is not a list of key names".into()))?;
    Ok(Tag {
        shard,
        index,
        of,
        run,
    })
}

/// Joins parts' logs (each file's records, as [`crate::runlog::read`] gives them). Every
/// record must come from the same run (its identity keys equal), every item of the run must
/// be in exactly one record, and every part must be there.
pub fn merge(files: &[(PathBuf, Vec<Logged>)]) -> Result<Merged, EvalError> {
    // The first record fixes the run: its part count, item count and identity.
    let mut run: Option<(Tag, Map<String, Value>, PathBuf, usize)> = None;
    // By index; the counts a file states (items, parts) size nothing: a forged count is an
    // error below, not an allocation.
    let mut slots: BTreeMap<usize, (usize, usize, Map<String, Value>)> = BTreeMap::new();
    let mut seen_parts = BTreeSet::new();
    for (f, (path, logged)) in files.iter().enumerate() {
        if logged.is_empty() {
            return Err(EvalError::Invalid(format!(
                "{}: no finished items (did its part run?)",
                path.display()
            )));
        }
        for l in logged {
            let at = At { path, line: l.line };
            let tag = read_tag(&l.record, &at)?;
            let (first, identity, first_path, first_line) = &*run.get_or_insert_with(|| {
                let identity: Map<String, Value> = tag
                    .run
                    .iter()
                    .map(|k| (k.clone(), l.record.get(k).cloned().unwrap_or(Value::Null)))
                    .collect();
                (tag.clone(), identity, path.clone(), l.line)
            });
            // Where the run was fixed, for the messages below (formatted only on an error).
            let there = || format!("{}:{first_line}", first_path.display());
            if tag.shard.n != first.shard.n || tag.of != first.of || tag.run != first.run {
                return Err(at.err(format!(
                    "part {} of a run of {} items, but {} is part {} of a run of {}: \
                     parts of different runs",
                    tag.shard,
                    tag.of,
                    there(),
                    first.shard,
                    first.of
                )));
            }
            for (key, want) in identity {
                let got = l.record.get(key).unwrap_or(&Value::Null);
                if got != want {
                    return Err(at.err(format!(
                        "{key} is {got}, but {} has {key} {want}: parts of different runs",
                        there()
                    )));
                }
            }
            if let Some((g, line, _)) = slots.get(&tag.index) {
                return Err(at.err(format!(
                    "item {} (index {}) is also at {}:{line}: an item must be in one log only",
                    l.record.get("id").unwrap_or(&Value::Null),
                    tag.index,
                    files[*g].0.display()
                )));
            }
            let mut record = l.record.clone();
            record.remove(KEY);
            slots.insert(tag.index, (f, l.line, record));
            seen_parts.insert(tag.shard.k);
        }
    }
    let Some((first, identity, _, _)) = run else {
        return Err(EvalError::Invalid("no logs to merge".into()));
    };
    let n = first.shard.n;
    // A run of fewer items than parts leaves the last parts nothing to log.
    let owning = n.min(first.of);
    if seen_parts.len() < owning {
        let absent: Vec<String> = (1..=owning)
            .filter(|k| !seen_parts.contains(k))
            .take(3)
            .map(|k| format!("{k}/{n}"))
            .collect();
        return Err(EvalError::Invalid(format!(
            "{} of the run's {n} parts are in none of the logs (part {}{}): give every part's log",
            owning - seen_parts.len(),
            absent.join(", "),
            if owning - seen_parts.len() > absent.len() {
                ", …"
            } else {
                ""
            }
        )));
    }
    if slots.len() < first.of {
        // Every index is below `of` and none is doubled, so the first gap is the first index
        // whose slot's rank differs from it.
        let gap = slots
            .keys()
            .enumerate()
            .find(|(rank, &i)| *rank != i)
            .map_or(slots.len(), |(rank, _)| rank);
        return Err(EvalError::Invalid(format!(
            "{} of the run's {} items are in no log (the first is item index {gap}): a part \
             stopped early; run its command again (it resumes from its log), then merge",
            first.of - slots.len(),
            first.of
        )));
    }
    let records: Vec<Map<String, Value>> = slots.into_values().map(|(_, _, r)| r).collect();
    let text = |key: &str| {
        identity
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let task = text("task");
    let mut items = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let scores = r.get("scores").and_then(Value::as_object).ok_or_else(|| {
            EvalError::Invalid(format!("item index {i} was logged without scores"))
        })?;
        let instruction_id_list = if task == "ifeval" {
            r.get("instruction_id_list")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
        } else {
            None
        };
        items.push(ItemScores {
            id: r.get("id").cloned().unwrap_or(Value::Null),
            scores: scores.clone().into_iter().collect(),
            instruction_id_list,
        });
    }
    let paths: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
    let report = RunReport {
        task,
        model: text("model"),
        n: items.len(),
        metrics: summarize(&items)?,
        details: json!({"parts": n, "merged": paths}),
        items,
    };
    Ok(Merged {
        records,
        report,
        parts: n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Map<String, Value> {
        json!({"task": "gsm8k_cot", "model": "m"})
            .as_object()
            .cloned()
            .unwrap()
    }

    /// The logs of a run of `total` items split `n` ways, item i scoring i mod 3 == 0.
    fn parts(total: usize, n: usize) -> Vec<(PathBuf, Vec<Logged>)> {
        (1..=n)
            .map(|k| {
                let shard = Shard { k, n };
                let part = Part::new(shard, total, 1);
                let mine = shard.pick((0..total).collect());
                // Logged out of order, as a batched run finishes them.
                let logged = mine
                    .iter()
                    .enumerate()
                    .rev()
                    .enumerate()
                    .map(|(line, (pos, &i))| {
                        let mut r = identity();
                        r.insert("id".into(), json!(i));
                        r.insert("scores".into(), json!({"acc": u8::from(i % 3 == 0)}));
                        r.insert(KEY.into(), part.tag(pos, &identity()));
                        Logged {
                            line: line + 1,
                            record: r,
                        }
                    })
                    .collect();
                (PathBuf::from(format!("part{k}.jsonl")), logged)
            })
            .collect()
    }

    #[test]
    fn parse_takes_k_of_n_and_refuses_the_rest() {
        assert_eq!(Shard::parse("2/3"), Ok(Shard { k: 2, n: 3 }));
        for bad in ["0/3", "4/3", "1/0", "1", "a/2", "1/2/3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_parts_cover_every_item_once() {
        for n in 1..5 {
            let mut all: Vec<usize> = (1..=n)
                .flat_map(|k| {
                    let s = Shard { k, n };
                    let mine = s.pick((0..11).collect::<Vec<usize>>());
                    (0..mine.len()).map(move |j| s.whole_index(j))
                })
                .collect();
            all.sort();
            assert_eq!(all, (0..11).collect::<Vec<_>>());
        }
        let p = Part::new(Shard { k: 2, n: 2 }, 3, 4);
        assert_eq!(
            (p.items, p.index(0), p.index(3), p.index(4)),
            (12, 4, 7, 12)
        );
    }

    #[test]
    fn merged_parts_are_the_one_runs_items_in_order() {
        let one = parts(10, 1);
        let two = merge(&parts(10, 3)).unwrap();
        let whole = merge(&one).unwrap();
        assert_eq!(two.report.items, whole.report.items);
        assert_eq!(two.report.metrics, whole.report.metrics);
        let ids: Vec<Value> = two.records.iter().map(|r| r["id"].clone()).collect();
        assert_eq!(ids, (0..10).map(|i| json!(i)).collect::<Vec<_>>());
        assert!(two.records.iter().all(|r| !r.contains_key(KEY)));
        assert_eq!(two.report.metrics["acc"].value, 0.4);
        // More parts than items: the parts past the last item log nothing and are not asked
        // for; a part that owns an item still is.
        let mut five = parts(3, 5);
        assert!(five[3].1.is_empty() && five[4].1.is_empty());
        five.truncate(3);
        assert_eq!(
            merge(&five).unwrap().report.items,
            merge(&parts(3, 1)).unwrap().report.items
        );
        five.remove(2);
        let e = merge(&five).unwrap_err().to_string();
        assert!(e.contains("part 3/5"), "{e}");
    }

    #[test]
    fn a_missing_doubled_or_foreign_record_is_refused() {
        let mut p = parts(10, 2);
        p[1].1.remove(0);
        let e = merge(&p).unwrap_err().to_string();
        assert!(e.contains("1 of the run's 10 items are in no log"), "{e}");

        let e = merge(&parts(10, 2)[..1]).unwrap_err().to_string();
        assert!(
            e.contains("1 of the run's 2 parts are in none of the logs (part 2/2)"),
            "{e}"
        );

        let mut p = parts(10, 2);
        let copy = p[0].1[0].clone();
        p[1].1.push(copy);
        let e = merge(&p).unwrap_err().to_string();
        assert!(e.contains("is also at part1.jsonl:1"), "{e}");

        let mut p = parts(10, 2);
        p[1].1[2].record.insert("model".into(), json!("other"));
        let e = merge(&p).unwrap_err().to_string();
        assert!(e.starts_with("part2.jsonl:3: model is \"other\""), "{e}");

        let mut p = parts(10, 2);
        p[1].1 = parts(12, 2)[1].1.clone();
        let e = merge(&p).unwrap_err().to_string();
        assert!(e.contains("parts of different runs"), "{e}");

        let mut p = parts(10, 2);
        p[0].1[0].record.remove(KEY);
        let e = merge(&p).unwrap_err().to_string();
        assert!(e.contains("part1.jsonl:1: not a part's record"), "{e}");
    }
}
