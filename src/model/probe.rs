//! Passes that enter the layer stack part-way up. The size budget's sensitivity probes
//! (`crate::budget`) change one weight matrix at a time; the layers below it then give the
//! unchanged model's residual stream, so a probe of layer `l`'s matrix starts at layer `l`
//! from the stream one full pass recorded there. Its logits are bit for bit a full pass's
//! (the layers it skips would compute the same values from the same inputs), at about half
//! the cost over a model's matrices.

use super::forward::Rounding;
use super::{Logits, Model};
use crate::Error;

/// Where a pass's layer loop starts.
pub(super) enum Entry<'a> {
    /// At the embedding: every pass but a probe's.
    Embed,
    /// At the embedding, pushing the residual stream entering each layer, and last the one
    /// leaving the last layer, onto the vector (`layers + 1` entries, each `n × hidden`).
    Record(&'a mut Vec<Vec<f32>>),
    /// At layer `.0` (the number of layers: at the final norm), with the stream entering it.
    At(usize, &'a [f32]),
}

impl<'a> Entry<'a> {
    pub(super) fn into_record(self) -> Option<&'a mut Vec<Vec<f32>>> {
        match self {
            Entry::Record(k) => Some(k),
            _ => None,
        }
    }
}

impl Model {
    /// The stream entering `layer`, checked against the model and the pass's `n` rows.
    pub(super) fn entering(&self, layer: usize, x: &[f32], n: usize) -> Result<Vec<f32>, Error> {
        let h = self.spec.hidden_size;
        if layer > self.layers.len() || x.len() != n * h {
            return Err(Error::Invalid(format!(
                "a pass entering layer {layer} of {} with {} values for {n} rows of {h}",
                self.layers.len(),
                x.len()
            )));
        }
        Ok(x.to_vec())
    }

    /// Every row's logits of `tokens` (`n × vocab`, as [`Model::forward_batch`] with
    /// [`Logits::All`] from a new state gives them), and the residual stream entering each
    /// layer and leaving the last (`layers + 1` entries of `n × hidden`): the starts of
    /// [`Model::forward_entering`].
    pub fn forward_recorded(&self, tokens: &[u32]) -> Result<(Vec<f32>, Vec<Vec<f32>>), Error> {
        let mut state = self.new_state(tokens.len());
        let mut streams = Vec::with_capacity(self.layers.len() + 1);
        let logits = self.forward_as(
            &mut [&mut state],
            tokens,
            &[tokens.len()],
            Logits::All,
            None,
            Rounding::Batch,
            Entry::Record(&mut streams),
        )?;
        Ok((logits, streams))
    }

    /// Every row's logits of `tokens` from a new state, the pass entering at `layer` with the
    /// stream `x` a [`Model::forward_recorded`] of the same tokens kept there: equal bit for
    /// bit to a whole pass when nothing below `layer` has changed since.
    pub fn forward_entering(
        &self,
        tokens: &[u32],
        layer: usize,
        x: &[f32],
    ) -> Result<Vec<f32>, Error> {
        let mut state = self.new_state(tokens.len());
        self.forward_as(
            &mut [&mut state],
            tokens,
            &[tokens.len()],
            Logits::All,
            None,
            Rounding::Batch,
            Entry::At(layer, x),
        )
    }
}
