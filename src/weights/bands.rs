//! How work is split across threads: bands of rows on the worker pool (decode) or rayon
//! (prefill), sized so every core stays busy and no task is too small to be worth its dispatch.

use crate::pool;
use rayon::prelude::*;

/// Prefill-sized batches: bands of `band` rows on rayon, `f(first, count, part)` filling
/// `part` (`n × count`, token-major), each part copied into `y` (`n × rows`).
pub(super) fn rayon_bands(
    rows: usize,
    band: usize,
    n: usize,
    y: &mut [f32],
    f: impl Fn(usize, usize, &mut [f32]) + Sync,
) {
    let parts: Vec<(usize, Vec<f32>)> = (0..rows.div_ceil(band))
        .into_par_iter()
        .map(|b| {
            let first = b * band;
            let count = band.min(rows - first);
            let mut part = vec![0.0f32; n * count];
            f(first, count, &mut part);
            (first, part)
        })
        .collect();
    for (first, part) in parts {
        let count = part.len() / n;
        for (t, r) in part.chunks_exact(count).enumerate() {
            y[t * rows + first..t * rows + first + count].copy_from_slice(r);
        }
    }
}

/// Rows per band when `rows` rows of `work` multiply-adds each are split over `threads`: a
/// few bands per thread so every core stays busy, none under about 16K multiply-adds so
/// dispatch stays cheap, and a multiple of `align` (the packed layouts' 16-row groups).
pub(super) fn band_rows(rows: usize, work: usize, threads: usize, align: usize) -> usize {
    rows.div_ceil(threads * 4)
        .max((16384 / work.max(1)).max(4))
        .next_multiple_of(align)
}

/// Runs `f(first_row, outputs)` over bands of `y` on the worker pool: a few bands per thread
/// so both cores stay busy, none smaller than about 16K multiply-adds so dispatch stays cheap.
pub(super) fn par_rows(
    y: &mut [f32],
    cols: usize,
    align: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    let pool = pool::global();
    let threads = pool.threads();
    let band = band_rows(y.len(), cols, threads, align);
    if band >= y.len() || threads == 1 {
        return f(0, y);
    }
    if pool.bands_on_rayon() {
        return y
            .par_chunks_mut(band)
            .enumerate()
            .for_each(|(i, ys)| f(i * band, ys));
    }
    let bands: Vec<std::sync::Mutex<&mut [f32]>> =
        y.chunks_mut(band).map(std::sync::Mutex::new).collect();
    pool.run(bands.len(), &|i| {
        let mut ys = bands[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i * band, &mut ys);
    });
}

/// A band of a few-token product on the worker pool: rows `first..first + count` of matrix
/// `matrix` in a group.
#[derive(Clone, Copy, Debug)]
pub(super) struct Band {
    pub matrix: usize,
    pub first: usize,
    pub count: usize,
}

thread_local! {
    /// Each thread's band output, reused from call to call: a 16-token decode step runs some
    /// 200 bands, and a fresh zeroed buffer each (plus a copy on the calling thread after the
    /// pool returned) was a tenth of the step.
    static PART: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `bands` on the worker pool for `n` tokens: `f(band, part)` fills `part` (`n × count`,
/// token-major, zeroed first), and the same task copies it into its rows of `ys[matrix]`
/// (`n × rows`, token-major). Each matrix's bands must be in row order and cover its rows.
pub(super) fn run_bands(
    bands: &[Band],
    n: usize,
    ys: &mut [&mut [f32]],
    f: impl Fn(&Band, &mut [f32]) + Sync,
) {
    if n == 0 {
        return;
    }
    // Every band's n pieces of output (band b's at b·n + token), split off the token rows in
    // order (disjoint borrows), in one allocation: a decode step makes this ~120 times.
    let mut pieces: Vec<Option<&mut [f32]>> = (0..bands.len() * n).map(|_| None).collect();
    for (i, y) in ys.iter_mut().enumerate() {
        let rows = y.len() / n;
        if rows == 0 {
            continue;
        }
        for (t, token) in y.chunks_exact_mut(rows).enumerate() {
            let mut rest = token;
            for (b, band) in bands
                .iter()
                .enumerate()
                .filter(|(_, band)| band.matrix == i)
            {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(band.count);
                pieces[b * n + t] = Some(piece);
                rest = tail;
            }
            debug_assert!(rest.is_empty(), "bands cover every row");
        }
    }
    let views: Vec<std::sync::Mutex<&mut [Option<&mut [f32]>]>> =
        pieces.chunks_mut(n).map(std::sync::Mutex::new).collect();
    pool::global().run(bands.len(), &|b| {
        let band = &bands[b];
        PART.with(|part| {
            let mut part = part.borrow_mut();
            let len = n * band.count;
            if part.len() < len {
                part.resize(len, 0.0);
            }
            let part = &mut part[..len];
            part.fill(0.0);
            f(band, part);
            let mut out = views[b].lock().unwrap_or_else(|e| e.into_inner());
            for (o, r) in out.iter_mut().zip(part.chunks_exact(band.count)) {
                if let Some(o) = o {
                    o.copy_from_slice(r);
                }
            }
        });
    });
}
