//! Prompt-lookup proposals: the context's last n tokens are searched for earlier in the
//! context (prompt and answer so far), and the tokens that followed that occurrence are
//! proposed. An answer that copies its prompt (a corrected paragraph, a reformatted table, an
//! edited JSON document) finds its next tokens this way.

use super::policy::{Policy, Source};

pub struct Lookup {
    max_ngram: usize,
    /// The kind of the last proposal (its acceptance is counted under it).
    last: Source,
    /// Where in the context the last proposal was copied from (its first token) and its length.
    from: Option<(usize, usize)>,
    /// The length of the context the last proposal was made for.
    at_len: usize,
}

impl Lookup {
    pub fn new(max_ngram: usize) -> Lookup {
        Lookup {
            max_ngram: max_ngram.max(1),
            last: Source::Gram(1),
            from: None,
            at_len: 0,
        }
    }

    pub fn last_source(&self) -> Source {
        self.last
    }

    /// The continuation of the longest (then latest) earlier occurrence of `ctx`'s last
    /// n-gram, as long as `policy` finds worth proposing, at most `room` tokens.
    pub fn propose(&mut self, ctx: &[u32], room: usize, policy: &Policy) -> Vec<u32> {
        let len = ctx.len();
        for n in (1..=self.max_ngram.min(len.saturating_sub(1))).rev() {
            let Some(at) = latest_occurrence(ctx, n) else {
                continue;
            };
            let start = at + n;
            let follow = &ctx[start..];
            // A streak: the last proposal was all kept (the context grew by it and the next
            // token), and this one is copied from right after it.
            let streak = self
                .from
                .is_some_and(|(f, k)| ctx.len() == self.at_len + k + 1 && start == f + k + 1);
            self.last = if streak {
                Source::Streak
            } else {
                Source::Gram(n)
            };
            let k = policy.draft_len(self.last, room.min(follow.len()));
            self.from = (k > 0).then_some((start, k));
            self.at_len = len;
            return follow[..k].to_vec();
        }
        self.from = None;
        Vec::new()
    }
}

/// The start of the latest occurrence of `ctx`'s last `n` tokens that ends before them.
fn latest_occurrence(ctx: &[u32], n: usize) -> Option<usize> {
    let len = ctx.len();
    let tail = &ctx[len - n..];
    (0..len - n).rev().find(|&i| &ctx[i..i + n] == tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn finds_the_longest_then_latest_match_and_proposes_what_followed() {
        assert_eq!(latest_occurrence(&[1, 2, 3, 1, 2], 2), Some(0));
        assert_eq!(latest_occurrence(&[1, 2, 9, 1, 2, 7, 1, 2], 2), Some(3));
        assert_eq!(latest_occurrence(&[1, 2, 3], 2), None);
        // Overlapping repeats: a run of one token proposes more of it.
        assert_eq!(latest_occurrence(&[5, 5, 5], 2), Some(0));

        let policy = Policy::new(None).fixed(4);
        let mut l = Lookup::new(3);
        // "a b c d e ... a b c" → d e (the 3-gram wins over the later 1-gram "c").
        let ctx = [1, 2, 3, 4, 5, 3, 9, 1, 2, 3];
        assert_eq!(l.propose(&ctx, 15, &policy), [4, 5, 3, 9]);
        assert_eq!(l.last_source(), Source::Gram(3));
        assert_eq!(l.propose(&ctx, 2, &policy), [4, 5]);
        // [4, 5, 6] proposed and kept, then 7 sampled: the copy goes on from 8.
        let mut l = Lookup::new(3);
        let ctx = [7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3];
        assert_eq!(l.propose(&ctx, 3, &policy), [4, 5, 6]);
        assert_eq!(l.last_source(), Source::Gram(3));
        let grown = [&ctx[..], &[4, 5, 6, 7]].concat();
        assert_eq!(l.propose(&grown, 3, &policy), [8, 9, 1]);
        assert_eq!(l.last_source(), Source::Streak);
        // Had the model written 0 instead of 7, the match would be a fresh one.
        let mut l2 = Lookup::new(3);
        l2.propose(&ctx, 3, &policy);
        let other = [&ctx[..], &[4, 5, 6, 0, 4, 5, 6]].concat();
        l2.propose(&other, 3, &policy);
        assert_eq!(l2.last_source(), Source::Gram(3));
        // Nothing earlier matches: no proposal.
        assert!(l.propose(&[1, 2, 3, 4], 15, &policy).is_empty());
        // The adaptive policy proposes nothing before a plain step was timed.
        assert!(l.propose(&ctx, 15, &Policy::new(None)).is_empty());
        let mut timed = Policy::new(None);
        timed.observe(Source::Gram(3), 0, 0, Duration::from_millis(10));
        assert!(!l.propose(&ctx, 15, &timed).is_empty());
    }
}
