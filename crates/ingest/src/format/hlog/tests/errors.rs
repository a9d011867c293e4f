//! Malformed, truncated, empty and foreign hlog inputs, and the limits.

use super::*;

/// A plain (uncompressed) V2 histogram: header, then `payload`.
fn v2(ratio: f64, payload_len: Option<u32>, payload: &[u8]) -> String {
    let mut h = Vec::new();
    h.extend_from_slice(&V2_COOKIE.to_be_bytes());
    h.extend_from_slice(&payload_len.unwrap_or(payload.len() as u32).to_be_bytes());
    h.extend_from_slice(&0u32.to_be_bytes());
    h.extend_from_slice(&3u32.to_be_bytes());
    h.extend_from_slice(&1u64.to_be_bytes());
    h.extend_from_slice(&1_000_000u64.to_be_bytes());
    h.extend_from_slice(&ratio.to_bits().to_be_bytes());
    h.extend_from_slice(payload);
    b64(&h)
}

/// Name, input, and the error's line, field and part of its message.
type Case<'a> = (&'a str, String, Option<u64>, Option<&'a str>, &'a str);

/// Malformed, truncated, empty and foreign inputs: an error naming the line and the field.
#[test]
fn bad_inputs_are_reported_with_line_and_field() {
    let good = first_histogram();
    let mut raw = Vec::new();
    base64_decode(good.as_bytes(), &mut raw).unwrap();
    let mut v1 = raw.clone();
    v1[..4].copy_from_slice(&0x1c84_9302u32.to_be_bytes());
    let mut short_zlib = raw.clone();
    short_zlib.truncate(raw.len() - 10);
    let mut bad_checksum = raw.clone();
    let n = bad_checksum.len();
    bad_checksum[n - 1] ^= 0x55;
    // three counts of 2^63 - 1: the total overflows 64 bits
    let huge = [[0xfeu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]; 3].concat();
    let l = LEGEND_LINE;
    let h = HISTOGRAM_FIELD;
    let cases: Vec<Case> = vec![
        ("empty", String::new(), None, None, "empty input"),
        (
            "blank lines",
            "\n\n  \n".into(),
            None,
            None,
            "no interval histogram lines",
        ),
        (
            "header only",
            format!("#[StartTime: 1.000 (seconds since epoch)]\n{l}\n"),
            None,
            None,
            "no interval histogram lines",
        ),
        (
            "bad base64",
            format!("{l}\n0.0,1.0,2.0,HIST*AAA\n"),
            Some(2),
            Some(h),
            "bad base64: \"*\" at character 5",
        ),
        (
            "base64 length",
            format!("{l}\n0.0,1.0,2.0,HISTF\n"),
            Some(2),
            Some(h),
            "bad base64",
        ),
        (
            "empty histogram",
            "0.0,1.0,2.0,\n".into(),
            Some(1),
            Some(h),
            "empty histogram",
        ),
        (
            "not a histogram",
            "0.0,1.0,2.0,aGVsbG8gd29ybGQ=\n".into(),
            Some(1),
            Some(h),
            "not an HdrHistogram encoding",
        ),
        (
            "too short",
            "0.0,1.0,2.0,AAA=\n".into(),
            Some(1),
            Some(h),
            "too short",
        ),
        (
            "V1",
            format!("#c\n0.0,1.0,2.0,{}\n", b64(&v1)),
            Some(2),
            Some(h),
            "V1 encoding",
        ),
        (
            "cut zlib",
            format!("0.0,1.0,2.0,{}\n", b64(&short_zlib)),
            Some(1),
            Some(h),
            "compressed histogram truncated",
        ),
        (
            "cut base64",
            format!("0.0,1.0,2.0,{}\n", &good[..good.len() / 2]),
            Some(1),
            Some(h),
            "truncated",
        ),
        (
            "checksum",
            format!("0.0,1.0,2.0,{}\n", b64(&bad_checksum)),
            Some(1),
            Some(h),
            "checksum",
        ),
        (
            "double histogram",
            format!("0.0,1.0,2.0,{}\n", v2(0.001, None, &[2])),
            Some(1),
            Some(h),
            "DoubleHistogram",
        ),
        (
            "payload announced",
            format!("0.0,1.0,2.0,{}\n", v2(1.0, Some(1 << 31), &[2])),
            Some(1),
            Some(h),
            "payload truncated",
        ),
        (
            "count overflow",
            format!("0.0,1.0,2.0,{}\n", v2(1.0, None, &huge)),
            Some(1),
            Some(h),
            "overflow",
        ),
        (
            "cut count",
            format!("0.0,1.0,2.0,{}\n", v2(1.0, None, &[0x80])),
            Some(1),
            Some(h),
            "truncated inside a number",
        ),
        (
            "beyond the counts",
            format!(
                "0.0,1.0,2.0,{}\n",
                v2(1.0, None, &[0xfd, 0xff, 0xff, 0x01, 2])
            ),
            Some(1),
            Some(h),
            "bad histogram",
        ),
        (
            "DoubleHistogram cookie",
            "0.0,1.0,2.0,DHISTgAAAAA=\n".into(),
            Some(1),
            Some(h),
            "a DoubleHistogram",
        ),
        (
            "3 fields",
            format!("{l}\nTag=a,0.0,1.0,{good}\n"),
            Some(2),
            None,
            "found 3",
        ),
        (
            "5 fields",
            format!("0.0,1.0,2.0,3.0,{good}\n"),
            Some(1),
            None,
            "found 5",
        ),
        (
            "timestamp",
            format!("x0.0,1.0,2.0,{good}\n"),
            Some(1),
            Some("StartTimestamp"),
            "not a number",
        ),
        (
            "length",
            format!("0.0,,2.0,{good}\n"),
            Some(1),
            Some("Interval_Length"),
            "not a number",
        ),
        (
            "max",
            format!("0.0,1.0,NaN,{good}\n"),
            Some(1),
            Some("Interval_Max"),
            "not a number",
        ),
        (
            "empty tag",
            format!("Tag=,0.0,1.0,2.0,{good}\n"),
            Some(1),
            Some("Tag"),
            "empty tag",
        ),
        (
            "tag alone",
            "Tag=abc\n".into(),
            Some(1),
            Some("Tag"),
            "comma",
        ),
        (
            "JSON",
            "{\"metrics\": {\"http_req_duration\": {}}, \"a\": 1}\n".into(),
            Some(1),
            None,
            "found 2",
        ),
        (
            "JMeter CSV",
            "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success\n"
                .into(),
            Some(1),
            None,
            "found 8",
        ),
        (
            "wrk2",
            "Running 30s test @ http://127.0.0.1/\n".into(),
            Some(1),
            None,
            "found 1",
        ),
    ];
    for (name, input, line, field, message) in cases {
        for chunk in [1, 7, input.len().max(1)] {
            let err = read(input.as_bytes(), TimeUnit::Ns, None, chunk).expect_err(name);
            assert_eq!(err.line, line, "{name}: {err}");
            assert_eq!(err.field.as_deref(), field, "{name}: {err}");
            assert!(err.message.contains(message), "{name}: {err}");
        }
    }
}

#[test]
fn the_unit_is_required() {
    let err = parser(&opts(None, None)).err().unwrap();
    assert_eq!(err.field.as_deref(), Some("unit"));
    assert!(err.message.contains("?unit=ns|us|ms|s"), "{err}");
}

#[test]
fn limits_lines_and_tags() {
    let mut p = parser(&opts(Some(TimeUnit::Us), None)).unwrap();
    let err = p.push(&vec![b'A'; MAX_LINE + 1]).unwrap_err();
    assert_eq!(err.line, Some(1));
    let good = first_histogram();
    let mut log = String::new();
    for i in 0..=MAX_TAGS {
        log.push_str(&format!("Tag=t{i},0.0,1.0,2.0,{good}\n"));
    }
    let err = read(log.as_bytes(), TimeUnit::Us, None, 4096).unwrap_err();
    assert_eq!(
        (err.line, err.field.as_deref()),
        (Some(MAX_TAGS as u64 + 1), Some("Tag"))
    );
}

/// A compressed histogram that inflates past [`MAX_DECODED`] (a V2 header announcing 17 MiB of
/// counts, then 17 MiB of zeros: less than 128 KiB of zlib) is refused, and the inflater's
/// buffer has stopped at the cap, never beyond.
#[test]
fn a_histogram_past_the_decoded_cap_is_refused_not_allocated() {
    let size = MAX_DECODED + (1 << 20);
    let mut v2 = vec![0u8; size];
    v2[..4].copy_from_slice(&V2_COOKIE.to_be_bytes());
    v2[4..8].copy_from_slice(&((size - 40) as u32).to_be_bytes());
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).unwrap());
    let mut zlib = vec![0; compressor.zlib_compress_bound(size)];
    let n = compressor.zlib_compress(&v2, &mut zlib).unwrap();
    zlib.truncate(n);
    assert!(zlib.len() < 128 << 10, "{}", zlib.len());
    let mut raw = 0x1c84_9314u32.to_be_bytes().to_vec();
    raw.extend_from_slice(&(zlib.len() as u32).to_be_bytes());
    raw.extend_from_slice(&zlib);
    let encoded = b64(&raw);

    let mut decoder = Decoder::default();
    let err = decoder.decode(encoded.as_bytes()).unwrap_err();
    assert_eq!(
        err,
        format!(
            "bad compressed histogram: it inflates to more than {MAX_DECODED} bytes, the limit \
             for one histogram"
        )
    );
    assert!(
        decoder.inflater.capacity() <= MAX_DECODED,
        "{}",
        decoder.inflater.capacity()
    );

    let line = format!("Tag=a,0.0,1.0,2.0,{encoded}\n");
    let err = read(line.as_bytes(), TimeUnit::Us, None, 64 << 10).unwrap_err();
    assert_eq!(
        (err.line, err.field.as_deref()),
        (Some(1), Some(HISTOGRAM_FIELD))
    );
    assert!(err.message.contains("inflates to more than"), "{err}");
}
