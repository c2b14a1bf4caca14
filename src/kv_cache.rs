//! The key/value cache: for every layer, the rotated keys and the values of every position so
//! far, laid out `[position][kv_head][head_dim]` so one step appends one contiguous row.

pub struct KvCache {
    layers: Vec<LayerCache>,
    row: usize,
    len: usize,
    capacity: usize,
}

struct LayerCache {
    k: Vec<f32>,
    v: Vec<f32>,
}

impl KvCache {
    /// A cache for `num_layers` layers of `kv_heads × head_dim` rows, holding at most
    /// `capacity` positions. Memory grows with use, not with capacity.
    pub fn new(num_layers: usize, kv_heads: usize, head_dim: usize, capacity: usize) -> KvCache {
        KvCache {
            layers: (0..num_layers)
                .map(|_| LayerCache {
                    k: Vec::new(),
                    v: Vec::new(),
                })
                .collect(),
            row: kv_heads * head_dim,
            len: 0,
            capacity,
        }
    }

    /// Positions stored (equal in every layer once a step is complete).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends one position's key and value for `layer`. The last layer's push completes the
    /// position.
    pub fn push(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let l = &mut self.layers[layer];
        l.k.extend_from_slice(k);
        l.v.extend_from_slice(v);
        if layer + 1 == self.layers.len() {
            self.len += 1;
        }
    }

    /// Keys and values of `layer` for positions `0..n` (n = positions pushed to that layer).
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        let l = &self.layers[layer];
        (&l.k, &l.v)
    }

    /// Forgets every position from `n` on (a conversation edited or rolled back).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        for l in &mut self.layers {
            l.k.truncate(n * self.row);
            l.v.truncate(n * self.row);
        }
        self.len = n;
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }
}
