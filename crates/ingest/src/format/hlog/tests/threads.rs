//! Decoding on several threads gives exactly what one thread gives: the same result, or the same
//! error (line, field and message), whatever the batches, the threads and the chunking.

use super::*;

/// One thread, each line decoded as it is read: the reference.
const ONE: Tuning = Tuning {
    threads: 1,
    batch_bytes: usize::MAX,
    batch_lines: usize::MAX,
    worker_counts_max: usize::MAX,
    main_decodes: true,
};

/// `threads` threads on batches of `lines` lines; `worker_counts_max` 0 makes the workers hand
/// their counts over after every few lines; with `main_decodes` false the calling thread leaves
/// every queued line to the workers, so they decode some whatever the scheduling.
fn tuning(threads: usize, lines: usize, worker_counts_max: usize, main_decodes: bool) -> Tuning {
    Tuning {
        threads,
        batch_bytes: usize::MAX,
        batch_lines: lines,
        worker_counts_max,
        main_decodes,
    }
}

fn tunings() -> Vec<Tuning> {
    let mut all = vec![Tuning::for_this_machine()];
    for threads in [2, 3] {
        for lines in [1, 2, 3, 7, 64] {
            for max in [0, usize::MAX] {
                for main_decodes in [true, false] {
                    all.push(tuning(threads, lines, max, main_decodes));
                }
            }
        }
    }
    all
}

fn read_tuned(
    input: &[u8],
    unit: TimeUnit,
    chunk: usize,
    tuning: Tuning,
) -> (Result<Extracted, IngestError>, u64) {
    let mut p = HlogParser::new(unit, Some("svc"), tuning);
    let mut pushed = Ok(());
    for part in input.chunks(chunk.max(1)) {
        pushed = p.push(part);
        if pushed.is_err() {
            break;
        }
    }
    let result = pushed.and_then(|()| p.end());
    let by_workers = p.log.pool.as_ref().map_or(0, |pool| pool.worker_lines);
    (result, by_workers)
}

/// `input` read with every tuning in chunks of `chunks` bytes gives what one thread gives;
/// returns that, and how many lines the other threads decoded in all.
fn same_on_threads(
    input: &[u8],
    unit: TimeUnit,
    chunks: &[usize],
    tunings: &[Tuning],
) -> (Result<Extracted, IngestError>, u64) {
    let (want, _) = read_tuned(input, unit, 64 << 10, ONE);
    let mut by_others = 0;
    for &chunk in chunks {
        for &t in tunings {
            let (got, others) = read_tuned(input, unit, chunk, t);
            assert_eq!(got, want, "{t:?}, chunks of {chunk}");
            by_others += others;
        }
    }
    (want, by_others)
}

/// An hlog of the benchmark's generator ([`hlog_stream`]), whole.
fn stream(intervals: usize, values: usize) -> Vec<u8> {
    let mut log = Vec::new();
    hlog_stream(intervals, values, |chunk| log.extend_from_slice(chunk));
    log
}

/// The lines of `log` (each with its `\n`).
fn lines(log: &[u8]) -> Vec<Vec<u8>> {
    log.split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn the_generator_and_the_fixtures_read_the_same_on_several_threads() {
    let log = stream(300, 2000);
    let (got, by_others) = same_on_threads(&log, TimeUnit::Ns, &[64 << 10, 1000, 97], &tunings());
    let got = got.unwrap();
    assert_eq!(got.labels.len(), 3);
    assert_eq!(
        got.labels.iter().map(|l| l.samples).sum::<u64>(),
        300 * 2000
    );
    assert!(by_others > 0, "the other threads decoded no line");
    for fixture in [TAGGED, UNTAGGED] {
        let (got, by_others) = same_on_threads(fixture, TimeUnit::Ns, &[4096, 13, 1], &tunings());
        assert!(got.is_ok());
        assert!(by_others > 0, "the other threads decoded no line");
    }
}

/// Bad lines anywhere (alone, or after another bad line, or past the tag limit) are reported
/// as one thread reports them: the first bad line.
#[test]
fn the_first_bad_line_is_reported_on_several_threads() {
    let base = lines(&stream(40, 300));
    let good = first_histogram();
    let mut raw = Vec::new();
    base64_decode(good.as_bytes(), &mut raw).unwrap();
    let mut bad_checksum = raw.clone();
    let n = bad_checksum.len();
    bad_checksum[n - 1] ^= 0x55;
    let bad: Vec<String> = vec![
        "Tag=x,0.0,1.0,2.0,HIST*AAA\n".into(),
        format!("Tag=x,0.0,1.0,2.0,{}\n", b64(&bad_checksum)),
        format!("Tag=x,0.0,NaN,2.0,{good}\n"),
        format!("0.0,1.0,{good}\n"),
        "Tag=abc\n".into(),
        format!("0.0,1.0,2.0,{}\n", &good[..good.len() / 2]),
    ];
    for at in [3, 4, 20, 41] {
        for (i, first) in bad.iter().enumerate() {
            let mut log = base.clone();
            log.insert(at, first.clone().into_bytes());
            // a second bad line after it: never the one reported
            let second = &bad[(i + 1) % bad.len()];
            log.insert((at + 1 + i * 5).min(log.len()), second.clone().into_bytes());
            let log = log.concat();
            let (err, _) = same_on_threads(&log, TimeUnit::Ns, &[64 << 10, 333], &tunings());
            assert_eq!(err.unwrap_err().line, Some(at as u64 + 1), "{first}");
        }
    }
}

#[test]
fn the_tag_limit_is_reported_on_several_threads() {
    let good = first_histogram();
    let mut raw = Vec::new();
    base64_decode(good.as_bytes(), &mut raw).unwrap();
    let not_v2 = b64(&raw[..3]);
    let tags = |last: &str, bad_at: Option<usize>| {
        let mut log = String::new();
        for i in 0..=MAX_TAGS + 3 {
            let h = if i == MAX_TAGS {
                last
            } else if Some(i) == bad_at {
                &not_v2
            } else {
                &good
            };
            log.push_str(&format!("Tag=t{},0.0,1.0,2.0,{h}\n", i.min(MAX_TAGS + 1)));
        }
        log
    };
    let line = MAX_TAGS as u64 + 1;
    for (log, want) in [
        // the 257th tag
        (
            tags(&good, None),
            (Some(line), Some("Tag"), "distinct tags"),
        ),
        // ... whose histogram's header is bad: that comes first
        (
            tags(&not_v2, None),
            (Some(line), Some(HISTOGRAM_FIELD), "too short"),
        ),
        // ... after a bad line
        (
            tags(&good, Some(200)),
            (Some(201), Some(HISTOGRAM_FIELD), "too short"),
        ),
    ] {
        // (lines of 3 KiB: fewer, larger batches)
        let few = [tuning(2, 5, 0, true), tuning(3, 64, usize::MAX, false)];
        let (err, _) = same_on_threads(log.as_bytes(), TimeUnit::Us, &[64 << 10, 777], &few);
        let err = err.unwrap_err();
        assert_eq!((err.line, err.field.as_deref()), (want.0, want.1), "{err}");
        assert!(err.message.contains(want.2), "{err}");
    }
}

/// A worker's counts past [`Tuning::worker_counts_max`] are handed over to the calling thread
/// as it goes; below it, they are kept to the end.
#[test]
fn the_workers_counts_are_bounded() {
    let log = stream(200, 500);
    let (want, _) = read_tuned(&log, TimeUnit::Ns, 4096, ONE);
    for (max, handed_over) in [(0, true), (usize::MAX, false)] {
        // (again if the worker got no CPU before the calling thread decoded every line)
        for attempt in 0.. {
            let mut p = HlogParser::new(TimeUnit::Ns, None, tuning(2, 16, max, true));
            for chunk in log.chunks(4096) {
                p.push(chunk).unwrap();
            }
            assert_eq!(p.end(), want);
            let pool = p.log.pool.as_ref().unwrap();
            let (worker_lines, handovers) = (pool.worker_lines, pool.handovers);
            if worker_lines > 0 || attempt == 20 {
                assert!(worker_lines > 0);
                assert_eq!(handovers > 0, handed_over, "{max}");
                break;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Mutated fixtures and generated logs never panic on several threads, and read as on one.
    #[test]
    fn mutated_logs_read_the_same_on_several_threads(
        which in 0usize..3,
        edits in testkit::edits(),
        chunk in 1usize..600,
        threads in 2usize..4,
        lines in 1usize..6,
        max in prop_oneof![Just(0usize), Just(usize::MAX)],
        main_decodes in proptest::bool::ANY,
    ) {
        let base = match which {
            0 => TAGGED.to_vec(),
            1 => UNTAGGED.to_vec(),
            _ => stream(12, 50),
        };
        let input = testkit::mutate(&base, &edits);
        let (want, _) = read_tuned(&input, TimeUnit::Ns, input.len(), ONE);
        let (got, _) = read_tuned(&input, TimeUnit::Ns, chunk, tuning(threads, lines, max, main_decodes));
        prop_assert_eq!(got, want);
    }
}
