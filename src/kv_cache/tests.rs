use super::*;

/// A ring holds the last positions in slots modulo its length; truncation keeps what the
/// next position's window still needs, or clears the cache when that is gone.
#[test]
fn a_ring_keeps_the_window_and_truncation_says_what_it_kept() {
    let (d, w) = (2, 8);
    let slots = ring_slots(w);
    assert_eq!((slots, slots % TILE), (32, 0));
    let mk = || KvCache::new(2, 1, d, 1000, KvPrecision::F32).with_windows(&[Some(w), None]);
    let fill = |c: &mut KvCache, from: usize, to: usize| {
        for p in from..to {
            let x = [p as f32, -(p as f32)];
            c.push(0, &x, &x);
            c.push(1, &x, &x);
        }
    };
    let value = |c: &KvCache, layer: usize, slot: usize| match c.layer(layer).head(0) {
        KvHead::F32 { v, .. } => v[slot * d],
        _ => unreachable!(),
    };
    let mut c = mk();
    fill(&mut c, 0, 100);
    assert_eq!(c.batch_limit(0), Some(slots - w + 1));
    assert_eq!(c.batch_limit(1), None);
    for p in 100 - slots..100 {
        assert_eq!(value(&c, 0, p % slots), p as f32);
    }
    assert_eq!(value(&c, 1, 37), 37.0);
    // Back to 90: positions 83..89 are still in the ring; the pushes overwrite in order.
    assert_eq!(c.truncate(90), 90);
    fill(&mut c, 90, 95);
    for p in 95 - w..95 {
        assert_eq!(value(&c, 0, p % slots), p as f32);
    }
    // Back to 10 of 95: the ring lost positions 3..9, so everything goes.
    assert_eq!(c.truncate(10), 0);
    assert!(c.is_empty() && c.bytes() == 0);
    // Before it wraps, a ring truncates like the others.
    let mut c = mk();
    fill(&mut c, 0, 20);
    assert_eq!(c.truncate(3), 3);
}

/// A shift drops the range, moves what follows down with its keys rotated (here: plus one)
/// and its values unchanged, in every element type; a ring refuses and keeps everything.
#[test]
fn a_shift_moves_later_positions_down_and_rotates_their_keys() {
    let d = 32;
    let row = |p: usize| -> Vec<f32> { (0..d).map(|i| (p * d + i) as f32 * 0.01).collect() };
    for precision in [
        KvPrecision::F32,
        KvPrecision::F16,
        KvPrecision::Q8,
        KvPrecision::Q4,
    ] {
        let mut c = KvCache::new(1, 1, d, 100, precision);
        for p in 0..40 {
            c.push(0, &row(p), &row(p));
        }
        assert!(c.shift(5, 7, &|_, k| k.iter_mut().for_each(|x| *x += 1.0)));
        assert_eq!(c.len(), 33);
        let tol = match precision {
            KvPrecision::F32 => 1e-6,
            KvPrecision::F16 => 4e-3,
            KvPrecision::Q8 => 2e-2,
            // Half a step of 1/8 of the block's largest value, twice for a rotated key.
            KvPrecision::Q4 => 0.15,
        };
        let layer = c.layer(0);
        let head = layer.head(0);
        let key = |t: usize, i: usize| -> (f32, f32) {
            match head {
                KvHead::F32 { k, v } => (k[(t / TILE * d + i) * TILE + t % TILE], v[t * d + i]),
                KvHead::F16 { k, v } => (
                    k[(t / TILE * d + i) * TILE + t % TILE].to_f32(),
                    v[t * d + i].to_f32(),
                ),
                KvHead::Q8(q) => (
                    q.k[key_at(d, t, i)] as f32 * q.ks[scale_at(1, t, 0)].to_f32(),
                    q.v[value_at(d, t, i)] as f32 * q.vs[scale_at(1, t, 0)].to_f32(),
                ),
                KvHead::Q4(q) => (
                    nibble(q.k, key_at(d, t, i)) as f32 * q.ks[scale_at(1, t, 0)].to_f32(),
                    nibble(q.v, value_at(d, t, i)) as f32 * q.vs[scale_at(1, t, 0)].to_f32(),
                ),
            }
        };
        for t in 0..33 {
            let src = if t < 5 { t } else { t + 7 };
            let shifted = if t < 5 { 0.0 } else { 1.0 };
            for i in 0..d {
                let (k, v) = key(t, i);
                let want = row(src)[i];
                assert!(
                    (k - want - shifted).abs() <= tol * (1.0 + want.abs()),
                    "{precision:?} key {t} {i}"
                );
                assert!(
                    (v - want).abs() <= tol * (1.0 + want.abs()),
                    "{precision:?} value {t} {i}"
                );
            }
        }
    }
    let mut ring = KvCache::new(1, 1, d, 100, KvPrecision::F32).with_windows(&[Some(8)]);
    for p in 0..20 {
        ring.push(0, &row(p), &row(p));
    }
    assert!(!ring.shift(2, 3, &|_, _| ()));
    assert_eq!(ring.len(), 20);
}
