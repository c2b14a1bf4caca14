//! Sampling settings from a model's generation_config: the one rule `pocket run` and
//! `pocket serve` share, so a model samples the same way whichever of them answers.

use super::SamplerConfig;
use pocket_formats::hf::GenerationConfig;

impl SamplerConfig {
    /// `self` (the caller's defaults: greedy, the chat's, or OpenAI's) with the model's
    /// generation_config applied. When `sample` (the config's `do_sample`, unless the caller
    /// answers greedily whatever the config says), the config's temperature, top-k, top-p and
    /// min-p replace the defaults', each unset one taking its neutral value (temperature 1, no
    /// top-k, top-p 1, no min-p). The repetition penalty applies either way, as transformers
    /// applies it to greedy search too.
    pub fn with_generation_config(mut self, g: &GenerationConfig, sample: bool) -> SamplerConfig {
        if sample {
            self.temperature = g.temperature.map_or(1.0, |t| t as f32);
            self.top_k = g.top_k.unwrap_or(0);
            self.top_p = g.top_p.map_or(1.0, |p| p as f32);
            self.min_p = g.min_p.map_or(0.0, |p| p as f32);
        }
        if let Some(p) = g.repetition_penalty {
            self.repeat_penalty = p as f32;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(do_sample: bool) -> GenerationConfig {
        GenerationConfig {
            bos_token_id: None,
            eos_token_ids: vec![],
            do_sample: Some(do_sample),
            temperature: Some(0.6),
            top_k: Some(20),
            top_p: None,
            min_p: None,
            repetition_penalty: Some(1.05),
            max_new_tokens: None,
        }
    }

    #[test]
    fn a_sampling_config_replaces_the_defaults_and_a_greedy_one_only_penalises() {
        let chat = SamplerConfig {
            temperature: 0.7,
            top_p: 0.9,
            repeat_penalty: 1.1,
            ..SamplerConfig::default()
        };
        let s = chat.clone().with_generation_config(&config(true), true);
        assert_eq!(
            (s.temperature, s.top_k, s.top_p, s.min_p),
            (0.6, 20, 1.0, 0.0)
        );
        assert_eq!(s.repeat_penalty, 1.05);
        let g = chat.with_generation_config(&config(true), false);
        assert_eq!((g.temperature, g.top_k, g.top_p), (0.7, 0, 0.9));
        assert_eq!(g.repeat_penalty, 1.05);
    }
}
