#[test]
#[ignore]
fn scratch_step_costs() {
    let path = std::env::var("SCRATCH_MODEL").unwrap();
    let m = pocket::loader::LoadedModel::open(std::path::Path::new(&path)).unwrap();
    let n = 16;
    let mut states: Vec<_> = (0..n).map(|_| m.model.new_state(512)).collect();
    for s in states.iter_mut() { m.model.forward_batch(s, &[1, 2, 3, 4, 5, 6, 7, 8], pocket::model::Logits::None).unwrap(); }
    let toks: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
    for round in 0..std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2) {
    let t = std::time::Instant::now();
    for _ in 0..20 { let mut refs: Vec<&mut _> = states.iter_mut().collect(); m.model.step_each(&mut refs, &toks).unwrap(); for s in states.iter_mut() { s.cache.truncate(8); } }
    eprintln!("step_each x16: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
    let t = std::time::Instant::now();
    for _ in 0..20 { let mut refs: Vec<&mut _> = states.iter_mut().collect(); m.model.step_many(&mut refs, &toks).unwrap(); for s in states.iter_mut() { s.cache.truncate(8); } }
    eprintln!("step_many x16: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
    let t = std::time::Instant::now();
    for _ in 0..20 { m.model.forward_batch(&mut states[0], &toks, pocket::model::Logits::All).unwrap(); states[0].cache.truncate(8); }
    eprintln!("forward_batch 16 All: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
    let t = std::time::Instant::now();
    for _ in 0..20 { m.model.forward_batch(&mut states[0], &toks, pocket::model::Logits::Last).unwrap(); states[0].cache.truncate(8); }
    eprintln!("forward_batch 16 Last: {:.2} ms", t.elapsed().as_secs_f64() * 1e3 / 20.0);
    let t = std::time::Instant::now();
    for _ in 0..50 { m.model.step(&mut states[0], 5, true).unwrap(); states[0].cache.truncate(8); }
    eprintln!("step x1: {:.2} ms {round}", t.elapsed().as_secs_f64() * 1e3 / 50.0);
    }
}
