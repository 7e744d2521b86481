//! The precision class of a candidate, derived from its measured error against a float64 copy of
//! the reference, never from the tolerance profile.
//!
//! The referee measures (python/crucible_harness/precision.py): per floating-point output, the
//! candidate's and the reference's relative RMS error against float64, and the same float64
//! computation with known roundings ("emulations": operands rounded to 10 mantissa bits to
//! nearest (`rn10`, an fp16 cast) or truncated (`rz10`, TF32 tensor cores), to 7 bits (`rn7`,
//! bf16), with or without the output rounded too). This module decides, in order:
//!
//! 1. no error at all: the task's own class;
//! 2. the fingerprint: when the candidate's error contains an emulation's error pattern (its
//!    coefficient is within [`COEFFICIENT_TOLERANCE`] of 1, to within [`MAX_COEFFICIENT_NOISE`]),
//!    that emulation's class; of several, the one most correlated with the error. This is what
//!    tells TF32 from fp16, whose error magnitudes are the same: tensor cores truncate fp32
//!    operands, casts round to nearest; and it finds a rounding that averaged out over a long
//!    positive sum, or that hides under accumulation error;
//! 3. the magnitude: equivalent mantissa bits `10 + log2(rel_rms(rn10+out) / rel_rms)`, at least
//!    [`FP32_MIN_BITS`] is fp32, at least [`TEN_BIT_MIN_BITS`] is tf32 (a 10-bit error without a
//!    rounding's fingerprint: the conservative side of the fp16/tf32 ambiguity), below is bf16;
//!    but an error within [`MATCHES_REFERENCE`] of the reference's own is never below the
//!    reference's class.
//!
//! Before any class, `beyond_rounding` decides whether an output is wrong rather than
//! imprecise: 10% or more off the float64 reference, which no rounding explains.
//!
//! A class is capped at the task's output dtype: on an fp16 task a 10-bit class is `fp16`, on a
//! bf16 task everything is `bf16`. The thresholds come from `scripts/precision-measure.py`; the
//! table is in docs/result-schema.md.

use crate::protocol::{MeasurePrecisionReply, MeasuredError, MeasuredFingerprint, MeasuredOutput};
use crucible_result::{
    Emulation, ErrorVsF64, Finding, Fingerprint, OutputPrecision, Precision, PrecisionClass,
    Severity, Timing,
};

/// A fingerprint's coefficient within this of 1 means the error contains that rounding.
/// Measured: the matching rounding 0.97–1.0, also under accumulation error 4× its own (an
/// H200's fp16 tensor cores, 4096³: 0.972); honest fp32 within 0.002 of 0; unrelated roundings
/// mostly near 0 or −0.5, but a truncation bias can project onto a small unrelated pattern with
/// any coefficient, hence the correlation that picks between several matches.
pub const COEFFICIENT_TOLERANCE: f64 = 0.25;

/// The coefficient's standard error must be at most this for the fingerprint to count.
pub const MAX_COEFFICIENT_NOISE: f64 = 0.05;

/// Fewer elements than this make the fingerprint a matter of chance (a regression on a handful
/// of values fits anything): only the magnitude counts.
pub const MIN_ELEMENTS_FOR_FINGERPRINT: u64 = 16;

/// A candidate whose error is at most this multiple of the reference's own is not less precise
/// than the reference (measured: sequential fp32 accumulation is up to 13× torch's blocked one,
/// but still 17 bits and more).
pub const MATCHES_REFERENCE: f64 = 2.0;

/// Equivalent mantissa bits at or above this are fp32. Measured: honest fp32 (sequential
/// accumulation over 16384 terms included) 17.1 and more; 10-bit computations at most 10.5, but
/// for rounded operands averaging out on positive inputs (up to 16.4), which the fingerprint
/// catches first.
pub const FP32_MIN_BITS: f64 = 14.0;

/// Equivalent mantissa bits at or above this (and below [`FP32_MIN_BITS`]) are a 10-bit class.
/// Measured: 10-bit computations 8.5 and more, bf16 at most 7.5 (but for bf16 operands on
/// positive inputs, which have a fingerprint).
pub const TEN_BIT_MIN_BITS: f64 = 8.0;

/// The emulation whose `rel_rms` is the 10-bit error scale of the magnitude rule.
const TEN_BIT_SCALE: &str = "rn10+out";

/// The best class an output of this dtype can measure: an fp16 output is at most fp16.
pub fn dtype_ceiling(dtype: &str) -> Option<PrecisionClass> {
    match dtype {
        "float32" | "float64" => Some(PrecisionClass::Fp32),
        "float16" => Some(PrecisionClass::Fp16),
        "bfloat16" => Some(PrecisionClass::Bf16),
        _ => None,
    }
}

/// The class an emulation stands for in a candidate.
fn emulation_class(name: &str) -> Option<PrecisionClass> {
    match name {
        "rn10" | "rn10+out" | "out10" => Some(PrecisionClass::Fp16),
        "rz10" => Some(PrecisionClass::Tf32),
        "rn7" | "rn7+out" | "out7" => Some(PrecisionClass::Bf16),
        _ => None,
    }
}

/// Whether an error contains the emulated rounding.
pub fn matches(fingerprint: &Fingerprint) -> bool {
    match (fingerprint.coefficient, fingerprint.coefficient_noise) {
        (Some(c), Some(noise)) => {
            (c - 1.0).abs() <= COEFFICIENT_TOLERANCE && noise <= MAX_COEFFICIENT_NOISE
        }
        _ => false,
    }
}

/// Of the matching emulations, the one most correlated with the error (correlation =
/// coefficient · ||d_emul|| / ||d||): its class and name.
fn fingerprinted<'a>(prints: &[Print<'a>], rel_rms: f64) -> Option<(PrecisionClass, &'a str)> {
    prints
        .iter()
        .filter(|p| matches(&p.fingerprint))
        .filter_map(|p| {
            let class = emulation_class(p.name)?;
            let correlation = p.fingerprint.coefficient? * p.rel_rms? / rel_rms;
            Some((correlation, class, p.name))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, class, name)| (class, name))
}

/// One emulation as the classification reads it.
#[derive(Debug, Clone, Copy)]
pub struct Print<'a> {
    pub name: &'a str,
    /// The emulation's own relative RMS error.
    pub rel_rms: Option<f64>,
    /// How much of the classified error is this emulation's.
    pub fingerprint: Fingerprint,
}

/// Caps `class` at the task's ceiling: nothing is more precise than the output's own dtype.
fn capped(class: PrecisionClass, ceiling: PrecisionClass) -> PrecisionClass {
    if class.mantissa_bits() >= ceiling.mantissa_bits() {
        ceiling
    } else {
        class
    }
}

/// Equivalent mantissa bits of a relative RMS error, given the error a 10-bit computation makes
/// on the same data (`scale10`).
pub fn equivalent_bits(rel_rms: f64, scale10: f64) -> Option<f64> {
    (rel_rms > 0.0 && scale10 > 0.0).then(|| 10.0 + (scale10 / rel_rms).log2())
}

/// One computation's error, as the classification reads it.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// Relative RMS error against float64; `None` reads as "not finite".
    pub rel_rms: Option<f64>,
    /// The emulations, with this computation's fingerprints.
    pub fingerprints: &'a [Print<'a>],
    pub elements: u64,
    /// `rel_rms` of the `rn10+out` emulation.
    pub scale10: Option<f64>,
}

/// The decided class, what decided it, and the equivalent mantissa bits.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub class: PrecisionClass,
    pub evidence: String,
    pub bits: Option<f64>,
}

/// Classifies one error. `reference` is the reference's own `(rel_rms, class)` for rule 3, absent
/// when classifying the reference itself.
pub fn classify(
    observed: &Observed<'_>,
    ceiling: PrecisionClass,
    reference: Option<(f64, PrecisionClass)>,
) -> Decision {
    let bits = match (observed.rel_rms, observed.scale10) {
        (Some(e), Some(scale)) => equivalent_bits(e, scale),
        _ => None,
    };
    let decided = |class, evidence: &str| Decision {
        class: capped(class, ceiling),
        evidence: evidence.to_string(),
        bits,
    };
    let error = observed.rel_rms.unwrap_or(f64::INFINITY);
    if error == 0.0 {
        return decided(ceiling, "exact");
    }
    if observed.elements >= MIN_ELEMENTS_FOR_FINGERPRINT
        && let Some((class, name)) = fingerprinted(observed.fingerprints, error)
    {
        return decided(class, &format!("emulation:{name}"));
    }
    let (magnitude, evidence) = match observed.scale10.filter(|s| *s > 0.0) {
        // No 10-bit scale (the output is exact in 10 bits): nothing to compare the error with.
        None => (ceiling, "no-scale"),
        Some(scale) => {
            let bits = equivalent_bits(error, scale).unwrap_or(f64::NEG_INFINITY);
            let class = if bits >= FP32_MIN_BITS {
                PrecisionClass::Fp32
            } else if bits >= TEN_BIT_MIN_BITS {
                PrecisionClass::Tf32
            } else {
                PrecisionClass::Bf16
            };
            (class, "magnitude")
        }
    };
    // An error the reference's own size is not a lower precision than the reference's, whatever
    // its size says (long accumulations lose bits in fp32 too).
    if let Some((reference_error, reference_class)) = reference
        && error <= MATCHES_REFERENCE * reference_error
        && capped(magnitude, ceiling).mantissa_bits() < reference_class.mantissa_bits()
    {
        return decided(reference_class, "matches-reference");
    }
    decided(magnitude, evidence)
}

/// The reference's own class on a task of this ceiling. A half-precision task's reference is
/// its dtype by definition; an fp32 task's reference can measure lower when PyTorch itself uses
/// TF32 (cuDNN allows it by default). Torch never casts an fp32 task to fp16 on its own, so a
/// 10-bit rounding in the reference is TF32 (rounded to nearest, as cuBLAS and cuDNN do).
fn reference_class(observed: &Observed<'_>, ceiling: PrecisionClass) -> Decision {
    if ceiling != PrecisionClass::Fp32 {
        return Decision {
            class: ceiling,
            evidence: "task-dtype".into(),
            bits: None,
        };
    }
    let mut decision = classify(observed, ceiling, None);
    if decision.class == PrecisionClass::Fp16 {
        decision.class = PrecisionClass::Tf32;
    }
    decision
}

fn finite(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite())
}

fn fingerprint(v: &MeasuredFingerprint) -> Fingerprint {
    Fingerprint {
        coefficient: finite(v.coefficient),
        coefficient_noise: finite(v.coefficient_noise),
        unexplained: finite(v.unexplained),
    }
}

fn error_vs_f64(v: &MeasuredError) -> ErrorVsF64 {
    ErrorVsF64 {
        rel_rms: finite(v.rel_rms),
        max_norm: finite(v.max_norm),
    }
}

/// Parses one output of the referee's measurement and classifies it; `None` for an output
/// whose dtype has no precision class.
fn output(v: &MeasuredOutput) -> Option<OutputPrecision> {
    let dtype = v.dtype.clone();
    let ceiling = dtype_ceiling(&dtype)?;
    let emulations: Vec<Emulation> = v
        .emulations
        .iter()
        .map(|e| Emulation {
            name: e.name.clone(),
            rel_rms: finite(e.rel_rms),
            candidate: fingerprint(&e.candidate),
            reference: fingerprint(&e.reference),
        })
        .collect();
    let elements = v.elements;
    let scale10 = emulations
        .iter()
        .find(|e| e.name == TEN_BIT_SCALE)
        .and_then(|e| e.rel_rms);
    let candidate = error_vs_f64(&v.candidate);
    let reference = error_vs_f64(&v.reference);
    let prints = |reference: bool| -> Vec<Print<'_>> {
        emulations
            .iter()
            .map(|e| Print {
                name: e.name.as_str(),
                rel_rms: e.rel_rms,
                fingerprint: if reference { e.reference } else { e.candidate },
            })
            .collect()
    };
    let (reference_prints, candidate_prints) = (prints(true), prints(false));
    let own = reference_class(
        &Observed {
            rel_rms: reference.rel_rms,
            fingerprints: &reference_prints,
            elements,
            scale10,
        },
        ceiling,
    );
    let decision = classify(
        &Observed {
            rel_rms: candidate.rel_rms,
            fingerprints: &candidate_prints,
            elements,
            scale10,
        },
        ceiling,
        reference.rel_rms.map(|e| (e, own.class)),
    );
    Some(OutputPrecision {
        index: v.index,
        dtype,
        elements,
        candidate,
        reference,
        candidate_bits: decision.bits,
        reference_bits: own.bits,
        class: decision.class,
        reference_class: own.class,
        evidence: decision.evidence,
        emulations,
    })
}

/// The lowest class of several; between the two 10-bit classes fp16, whose matched reference is
/// the faster one.
fn lowest(classes: impl Iterator<Item = PrecisionClass>) -> Option<PrecisionClass> {
    classes.min_by_key(|c| (c.mantissa_bits(), *c != PrecisionClass::Fp16))
}

/// A candidate output this far from the float64 reference (relative RMS error) is wrong, not
/// imprecise: bf16, the coarsest class, rounds by at most 2^-8 (0.4%) per operation. It passed
/// the elementwise tolerance (rtol is at most 1e-2) only through atol, i.e. because its expected
/// values are small next to atol: a softmax over 393,216 values (KernelBench's 23_Softmax) is
/// about 2.5e-6 everywhere, and zeros pass it, as does 1.5 times the right answer (an H200 run
/// of the throughput benchmark judged that `correct`).
pub const WRONG_REL_RMS: f64 = 0.1;

/// ... provided the output is well conditioned: the reference's own error is at most this
/// fraction of the candidate's. An output that is rounding noise (the mean of a normalised
/// tensor) has the reference 100% off too, and every honest candidate with it.
pub const WRONG_OVER_REFERENCE: f64 = 1e-2;

/// ... and, where the emulations were measured, every known rounding of the computation makes
/// at most this fraction of the candidate's error (a cancelling output can magnify TF32's or
/// bf16's rounding; the emulation then shows it).
pub const WRONG_OVER_EMULATIONS: f64 = 0.25;

/// Why the candidate's output is wrong, when one is further from the float64 reference than
/// any rounding explains (see [`WRONG_REL_RMS`]); read from the errors the referee reports also
/// when the rest of the measurement could not be made.
pub(crate) fn beyond_rounding(reply: &MeasurePrecisionReply) -> Option<String> {
    reply.errors.iter().find_map(|errors| {
        let candidate = errors.candidate.unwrap_or(f64::INFINITY);
        let reference = errors.reference?;
        let measured = reply
            .outputs
            .iter()
            .flatten()
            .find(|o| o.index == errors.index);
        let coarsest = measured
            .into_iter()
            .flat_map(|o| &o.emulations)
            .filter_map(|e| e.rel_rms.map(|r| (r, e.name.as_str())))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let wrong = candidate >= WRONG_REL_RMS
            && reference <= WRONG_OVER_REFERENCE * candidate
            && coarsest.is_none_or(|(r, _)| r <= WRONG_OVER_EMULATIONS * candidate);
        wrong.then(|| {
            let rounding = coarsest.map_or_else(String::new, |(r, name)| {
                format!(", the coarsest rounding the judge emulates ({name}): {r:.3e}")
            });
            format!(
                "output {} has a relative RMS error of {candidate:.3e} against a float64 copy of \
                 the reference (the reference's own: {reference:.3e}{rounding}). Every element was \
                 within atol only because the expected values are small next to it; no \
                 floating-point rounding makes an error of {:.0}% or more",
                errors.index,
                WRONG_REL_RMS * 100.0
            )
        })
    })
}

/// The measurement the referee replied with (`measure_precision`), classified.
pub(crate) fn from_reply(reply: MeasurePrecisionReply, trial: u32) -> Precision {
    if let Some(reason) = reply.unmeasured {
        return Precision {
            trial,
            unmeasured: Some(reason),
            ..Precision::default()
        };
    }
    let outputs: Vec<OutputPrecision> = reply.outputs.iter().flatten().filter_map(output).collect();
    if outputs.is_empty() {
        return Precision {
            trial,
            unmeasured: Some("no floating-point output with a precision class".into()),
            ..Precision::default()
        };
    }
    Precision {
        trial,
        class: lowest(outputs.iter().map(|o| o.class)),
        reference_class: lowest(outputs.iter().map(|o| o.reference_class)),
        outputs,
        unmeasured: None,
        forwards_ahead_s: None,
    }
}

/// The class to time the reference at a second time: the candidate's, when it is not the
/// reference's own.
pub fn matched_class(precision: &Precision) -> Option<PrecisionClass> {
    let (class, reference) = (precision.class?, precision.reference_class?);
    (class != reference).then_some(class)
}

/// The speedup against the reference at the candidate's class, and that class: the plain
/// speedup when the classes agree, else from the second reference timing.
pub fn matched_speedup(
    speedup: Option<f64>,
    timing: Option<&Timing>,
    precision: Option<&Precision>,
) -> Option<(f64, PrecisionClass)> {
    let speedup = speedup?;
    let precision = precision?;
    let class = precision.class?;
    if precision.reference_class? == class {
        return Some((speedup, class));
    }
    let timing = timing?;
    let matched = timing
        .reference_matched
        .as_ref()
        .filter(|_| timing.reference_matched_class == Some(class))?;
    Some((matched.median_ms / timing.candidate.median_ms, class))
}

/// What an `emulation:<name>` evidence says, in words a model can act on.
fn explain(evidence: &str) -> &'static str {
    match evidence.strip_prefix("emulation:").unwrap_or(evidence) {
        "rz10" => {
            "its error contains the truncation of its operands to 10 mantissa bits (TF32 tensor \
             cores: Triton's default `tl.dot` on fp32 operands; `input_precision=\"ieee\"` keeps \
             fp32)"
        }
        "rn10" | "rn10+out" | "out10" => {
            "its error contains the rounding of its operands (or outputs) to 10 mantissa bits, \
             nearest even: fp16 casts"
        }
        "rn7" | "rn7+out" | "out7" => {
            "its error contains the rounding of its operands (or outputs) to 7 mantissa bits: bf16 \
             casts"
        }
        "matches-reference" => "it is as precise as the reference",
        _ => {
            "no rounding of the operands or outputs matches its error, so the class is read from \
             the error's size"
        }
    }
}

fn sci(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |x| format!("{x:.3e}"))
}

/// `precision-downgrade`: the candidate measured below the reference's own precision.
pub fn downgrade_finding(precision: &Precision) -> Option<Finding> {
    let (class, reference) = (precision.class?, precision.reference_class?);
    if class.mantissa_bits() >= reference.mantissa_bits() {
        return None;
    }
    let worst = precision.outputs.iter().find(|o| o.class == class)?;
    let bits = worst.candidate_bits.map_or_else(String::new, |b| {
        format!(", {b:.1} equivalent mantissa bits")
    });
    Some(Finding::new(
        "precision-downgrade",
        Severity::Flag,
        format!(
            "measured precision class {} on a task whose reference computes at {}: output {} \
             has a relative RMS error of {} against a float64 reference (the reference's own: \
             {}){bits}; {}. Its speedup is also reported against the reference run at {} \
             (`speedup_matched`)",
            class.as_str(),
            reference.as_str(),
            worst.index,
            sci(worst.candidate.rel_rms),
            sci(worst.reference.rel_rms),
            explain(&worst.evidence),
            class.as_str(),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The emulations' own errors for a 256×256×4096 matmul on rand (positive) inputs, from
    /// scripts/precision-measure.py (CPU).
    const RAND_4096: [(&str, f64); 7] = [
        ("out10", 2.24e-4),
        ("out7", 1.79e-3),
        ("rn10", 5.57e-6),
        ("rn10+out", 2.24e-4),
        ("rz10", 6.51e-4),
        ("rn7", 4.42e-5),
        ("rn7+out", 1.79e-3),
    ];

    fn fp(coefficient: f64, noise: f64) -> Fingerprint {
        Fingerprint {
            coefficient: Some(coefficient),
            coefficient_noise: Some(noise),
            unexplained: None,
        }
    }

    /// The emulations of `RAND_4096` with these fingerprints (the others unrelated: 0).
    fn prints(given: &[(&'static str, Fingerprint)]) -> Vec<Print<'static>> {
        RAND_4096
            .iter()
            .map(|&(name, rel_rms)| Print {
                name,
                rel_rms: Some(rel_rms),
                fingerprint: given
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(fp(0.0, 1e-4), |(_, f)| *f),
            })
            .collect()
    }

    fn decide(rel_rms: f64, given: &[(&'static str, Fingerprint)]) -> Decision {
        let prints = prints(given);
        classify(
            &Observed {
                rel_rms: Some(rel_rms),
                fingerprints: &prints,
                elements: 65536,
                scale10: Some(2.24e-4),
            },
            PrecisionClass::Fp32,
            Some((8.12e-8, PrecisionClass::Fp32)),
        )
    }

    #[test]
    fn measured_rows_classify_as_their_precision() {
        use PrecisionClass::*;
        let class = |d: Decision| (d.class, d.evidence);
        // Rows of the measured table (matmul K=4096, rand inputs, CPU).
        assert_eq!(decide(8.12e-8, &[]).class, Fp32);
        // fp16 operands with fp32 accumulation: the error averages down to 15.3 equivalent bits
        // and 5.6e-6 relative, but it contains the rn10 pattern.
        let fp16 = [("rn10", fp(1.0, 6e-5)), ("rn7", fp(-0.007, 5e-4))];
        assert_eq!(
            class(decide(5.57e-6, &fp16)),
            (Fp16, "emulation:rn10".into())
        );
        // The same under accumulation error 3× the operands' rounding (fp16 tensor cores).
        let tensor_cores = [("rn10", fp(0.97, 0.01)), ("rn7", fp(0.0316, 0.001))];
        assert_eq!(decide(1.63e-5, &tensor_cores).class, Fp16);
        // Truncated operands (TF32 tensor cores): the truncation bias also projects onto the rn7
        // pattern (coefficient 1.66); the correlation picks rz10.
        let tf32 = [
            ("rn10", fp(-1.74, 0.5)),
            ("rz10", fp(1.0, 5e-7)),
            ("rn7", fp(1.66, 0.06)),
        ];
        assert_eq!(
            class(decide(6.51e-4, &tf32)),
            (Tf32, "emulation:rz10".into())
        );
        let tf32_spurious_bf16 = [("rz10", fp(1.0, 5e-7)), ("rn7", fp(1.0, 0.04))];
        assert_eq!(decide(6.51e-4, &tf32_spurious_bf16).class, Tf32);
        // bf16 operands: 12.3 equivalent bits, the rn7 pattern.
        let bf16 = [("rn10", fp(-0.444, 0.03)), ("rn7", fp(1.0, 6e-6))];
        assert_eq!(decide(4.42e-5, &bf16).class, Bf16);
        // Everything in fp16 / bf16, outputs rounded too.
        let fp16_all = [
            ("out10", fp(0.963, 0.001)),
            ("rn10", fp(0.966, 0.2)),
            ("rn10+out", fp(0.999, 2e-4)),
        ];
        assert_eq!(
            class(decide(2.24e-4, &fp16_all)),
            (Fp16, "emulation:rn10+out".into())
        );
        let bf16_all = [("out7", fp(0.967, 0.001)), ("rn7+out", fp(1.0, 3e-5))];
        assert_eq!(decide(1.79e-3, &bf16_all).class, Bf16);
        // A noisy coefficient does not count: no fingerprint, 11.9 bits by magnitude.
        let noisy = [("rn10", fp(0.9, 0.09))];
        assert_eq!(class(decide(6.13e-5, &noisy)), (Tf32, "magnitude".into()));
    }

    #[test]
    fn the_most_correlated_match_wins() {
        // layernorm on bf16 operands: the rz10 pattern is 92% contained, but it is a small part
        // of the error (correlation 0.12); rn7 is all of it.
        let prints = [
            Print {
                name: "rz10",
                rel_rms: Some(2.19e-4),
                fingerprint: fp(0.92, 0.007),
            },
            Print {
                name: "rn7",
                rel_rms: Some(1.66e-3),
                fingerprint: fp(1.0, 3e-8),
            },
        ];
        let observed = Observed {
            rel_rms: Some(1.66e-3),
            fingerprints: &prints,
            elements: 1 << 20,
            scale10: Some(2.95e-4),
        };
        let d = classify(&observed, PrecisionClass::Fp32, None);
        assert_eq!(d.class, PrecisionClass::Bf16);
    }

    #[test]
    fn magnitude_decides_without_a_fingerprint() {
        // gelu computed in fp16 intermediates: no emulation matches, 9.8 bits.
        let d = decide(2.56e-4, &[]);
        assert_eq!(
            (d.class, d.evidence.as_str()),
            (PrecisionClass::Tf32, "magnitude")
        );
        assert!((d.bits.unwrap() - 9.81).abs() < 0.01);
        assert_eq!(decide(2.1e-3, &[]).class, PrecisionClass::Bf16);
        // The thresholds themselves.
        let at = |bits: f64| 2.24e-4 / 2f64.powf(bits - 10.0);
        let class = |bits| decide(at(bits), &[]).class;
        assert_eq!(class(FP32_MIN_BITS + 0.01), PrecisionClass::Fp32);
        assert_eq!(class(FP32_MIN_BITS - 0.01), PrecisionClass::Tf32);
        assert_eq!(class(TEN_BIT_MIN_BITS + 0.01), PrecisionClass::Tf32);
        assert_eq!(class(TEN_BIT_MIN_BITS - 0.01), PrecisionClass::Bf16);
    }

    #[test]
    fn an_error_the_size_of_the_references_is_not_lower() {
        let prints = prints(&[]);
        let observed = |rel_rms| Observed {
            rel_rms: Some(rel_rms),
            fingerprints: &prints,
            elements: 65536,
            scale10: Some(2.24e-4),
        };
        // 13.4 bits by magnitude, but 1.9× a reference that loses as much.
        let reference = Some((9e-6, PrecisionClass::Fp32));
        let d = classify(&observed(1.7e-5), PrecisionClass::Fp32, reference);
        assert_eq!(
            (d.class, d.evidence.as_str()),
            (PrecisionClass::Fp32, "matches-reference")
        );
        assert_eq!(
            classify(&observed(2.1e-5), PrecisionClass::Fp32, reference).class,
            PrecisionClass::Tf32
        );
        // Far more precise than a TF32 reference: fp32, not the reference's class.
        let tf32_reference = Some((2.9e-4, PrecisionClass::Tf32));
        let d = classify(&observed(1e-7), PrecisionClass::Fp32, tf32_reference);
        assert_eq!(d.class, PrecisionClass::Fp32);
    }

    #[test]
    fn a_fingerprint_needs_enough_elements_and_a_close_match() {
        let given = [("rn10", fp(1.0, 0.0))];
        let prints = prints(&given);
        let scalar = Observed {
            rel_rms: Some(1e-7),
            fingerprints: &prints,
            elements: MIN_ELEMENTS_FOR_FINGERPRINT - 1,
            scale10: Some(2.24e-4),
        };
        assert_eq!(
            classify(&scalar, PrecisionClass::Fp32, None).class,
            PrecisionClass::Fp32
        );
        let off = [("rn10", fp(1.0 + COEFFICIENT_TOLERANCE + 0.01, 1e-3))];
        assert_eq!(decide(5.6e-6, &off).class, PrecisionClass::Fp32);
        let noisy = [("rn10", fp(1.0, MAX_COEFFICIENT_NOISE + 0.01))];
        assert_eq!(decide(5.6e-6, &noisy).class, PrecisionClass::Fp32);
        assert!(matches(&fp(
            1.0 - COEFFICIENT_TOLERANCE,
            MAX_COEFFICIENT_NOISE
        )));
    }

    #[test]
    fn half_tasks_cap_at_their_dtype() {
        let none: [Print<'_>; 0] = [];
        let observed = |rel_rms| Observed {
            rel_rms: Some(rel_rms),
            fingerprints: &none,
            elements: 2048,
            scale10: Some(2.2e-4),
        };
        // An honest fp16 candidate: output rounding, like the reference's own.
        let reference = Some((2.2e-4, PrecisionClass::Fp16));
        let d = classify(&observed(2.3e-4), PrecisionClass::Fp16, reference);
        assert_eq!(d.class, PrecisionClass::Fp16);
        // Computed in bf16: below the task's fp16.
        let bf16 = [Print {
            name: "rn7",
            rel_rms: Some(1.7e-3),
            fingerprint: fp(1.0, 1e-4),
        }];
        let d = classify(
            &Observed {
                fingerprints: &bf16,
                ..observed(1.8e-3)
            },
            PrecisionClass::Fp16,
            reference,
        );
        assert_eq!(d.class, PrecisionClass::Bf16);
        // Nothing on a bf16 task is better than bf16; exact outputs are the task's class.
        let d = classify(&observed(0.0), PrecisionClass::Bf16, None);
        assert_eq!(
            (d.class, d.evidence.as_str()),
            (PrecisionClass::Bf16, "exact")
        );
    }

    /// A referee reply with one output: `(emulation, its rel_rms, candidate coefficient,
    /// reference coefficient)`, every noise 1e-4.
    fn reply(
        dtype: &str,
        candidate: f64,
        reference: f64,
        prints: &[(&str, f64, f64, f64)],
    ) -> MeasurePrecisionReply {
        let emulations: Vec<serde_json::Value> = prints
            .iter()
            .map(|(name, rel_rms, cand, refc)| {
                json!({"name": name, "rel_rms": rel_rms,
                       "candidate": {"coefficient": cand, "coefficient_noise": 1e-4, "unexplained": null},
                       "reference": {"coefficient": refc, "coefficient_noise": 1e-4, "unexplained": null}})
            })
            .collect();
        serde_json::from_value(json!({"unmeasured": null, "outputs": [{
            "index": 0, "dtype": dtype, "elements": 1024,
            "candidate": {"rel_rms": candidate, "max_norm": 1e-3},
            "reference": {"rel_rms": reference, "max_norm": 1e-6},
            "emulations": emulations,
        }], "errors": [{"index": 0, "candidate": candidate, "reference": reference}]}))
        .expect("a reply of the protocol's shape")
    }

    #[test]
    fn an_error_no_rounding_explains_is_wrong_only_on_a_well_conditioned_output() {
        let bf16 = [("rn7", 4.0e-3, 0.0, 0.0), ("rz10", 7.7e-4, 0.0, 0.0)];
        // 1.5 times a softmax: 50% off, the reference 5e-8, bf16 rounding 0.4%.
        let scaled = beyond_rounding(&reply("float32", 0.5, 5.4e-8, &bf16)).expect("wrong");
        assert!(
            scaled.starts_with("output 0 has a relative RMS error of 5.000e-1")
                && scaled.contains("(rn7): 4.000e-3"),
            "{scaled}"
        );
        // Honest bf16, or 5% off: imprecise, not wrong (the precision class says how much).
        assert!(beyond_rounding(&reply("float32", 4.1e-3, 5.4e-8, &bf16)).is_none());
        assert!(beyond_rounding(&reply("float32", 0.05, 5.4e-8, &bf16)).is_none());
        // Rounding noise (the mean of a normalised tensor): the reference is as far off.
        assert!(beyond_rounding(&reply("float32", 1.4, 0.9, &bf16)).is_none());
        // A cancelling output that magnifies bf16's rounding to 30%: the emulation shows it.
        let cancelling = [("rn7", 0.3, 0.0, 0.0)];
        assert!(beyond_rounding(&reply("float32", 0.35, 1e-6, &cancelling)).is_none());
        // Unmeasured (the emulations would exceed their budget): the errors still decide.
        let errors_only = serde_json::from_value(json!({
            "unmeasured": "over budget", "outputs": null,
            "errors": [{"index": 0, "candidate": 1e-5, "reference": 1e-7},
                       {"index": 1, "candidate": 1.0, "reference": 1e-7}]}))
        .expect("an unmeasured reply");
        let zeros = beyond_rounding(&errors_only).expect("wrong");
        assert!(
            zeros.starts_with("output 1 has a relative RMS error of 1.000e0 "),
            "{zeros}"
        );
        // A non-finite candidate error (an overflow) with a precise reference is wrong too.
        let overflow = serde_json::from_value(json!({"unmeasured": "over budget", "outputs": null,
            "errors": [{"index": 0, "candidate": null, "reference": 1e-7}]}))
        .expect("a reply");
        assert!(beyond_rounding(&overflow).is_some());
    }

    #[test]
    fn replies_become_classes_findings_and_matched_speedups() {
        let fp16_cast = reply(
            "float32",
            2.9e-4,
            1.4e-7,
            &[
                ("rn10+out", 3.6e-4, 0.67, 0.0),
                ("rn10", 2.9e-4, 1.0, 0.0),
                ("rz10", 7.7e-4, -0.07, 0.0),
            ],
        );
        let p = from_reply(fp16_cast, 0);
        assert_eq!(p.class, Some(PrecisionClass::Fp16));
        assert_eq!(p.reference_class, Some(PrecisionClass::Fp32));
        assert_eq!(p.outputs[0].evidence, "emulation:rn10");
        assert_eq!(matched_class(&p), Some(PrecisionClass::Fp16));
        let finding = downgrade_finding(&p).expect("a downgrade");
        assert_eq!(finding.severity, Severity::Flag);
        assert!(
            finding.message.contains("class fp16"),
            "{}",
            finding.message
        );
        assert!(
            finding.message.contains("fp16 casts"),
            "{}",
            finding.message
        );

        // Matched speedup: from the second timing when the classes differ.
        let stats = |median_ms| crucible_result::Stats {
            n: 1,
            median_ms,
            mean_ms: median_ms,
            min_ms: median_ms,
            max_ms: median_ms,
            iqr_ms: 0.0,
            cv: 0.0,
            samples_ms: vec![median_ms],
        };
        let timing = Timing {
            reference: stats(2.0),
            candidate: stats(0.4),
            warmup: 5,
            l2_flush_bytes: 0,
            candidate_phase_wall_s: 0.1,
            profiled_busy_ms: None,
            outside_forward_ms: None,
            outside_batch_forwards: None,
            synced_forward_ms: None,
            reference_matched: Some(stats(0.2)),
            reference_matched_class: Some(PrecisionClass::Fp16),
            autotune: None,
        };
        let matched = matched_speedup(Some(5.0), Some(&timing), Some(&p)).unwrap();
        assert_eq!(matched, (0.5, PrecisionClass::Fp16));
        assert_eq!(matched_speedup(None, Some(&timing), Some(&p)), None);
        assert_eq!(matched_speedup(Some(5.0), Some(&timing), None), None);

        // An honest candidate: fp32, no finding, matched speedup = speedup, no second timing.
        let honest = from_reply(
            reply("float32", 2e-7, 1.4e-7, &[("rn10+out", 3.6e-4, 0.0, 0.0)]),
            0,
        );
        assert_eq!(honest.class, Some(PrecisionClass::Fp32));
        assert_eq!(matched_class(&honest), None);
        assert!(downgrade_finding(&honest).is_none());
        assert_eq!(
            matched_speedup(Some(1.5), None, Some(&honest)),
            Some((1.5, PrecisionClass::Fp32))
        );

        // A reference that itself runs TF32 (rounded to nearest, e.g. cuDNN): tf32, and a TF32
        // candidate is no downgrade.
        let tf32_reference = from_reply(
            reply(
                "float32",
                7.7e-4,
                2.9e-4,
                &[("rn10", 2.9e-4, -0.5, 1.0), ("rz10", 7.7e-4, 1.0, -0.07)],
            ),
            0,
        );
        assert_eq!(tf32_reference.reference_class, Some(PrecisionClass::Tf32));
        assert_eq!(tf32_reference.class, Some(PrecisionClass::Tf32));
        assert!(downgrade_finding(&tf32_reference).is_none());

        let unmeasured = from_reply(
            serde_json::from_value(
                json!({"unmeasured": "no float64 conv3d", "outputs": null, "errors": []}),
            )
            .expect("an unmeasured reply"),
            0,
        );
        assert_eq!(unmeasured.class, None);
        assert_eq!(unmeasured.unmeasured.as_deref(), Some("no float64 conv3d"));
        assert!(downgrade_finding(&unmeasured).is_none());
        let integer = from_reply(reply("int64", 0.0, 0.0, &[]), 0);
        assert!(integer.unmeasured.is_some());
    }

    #[test]
    fn the_lowest_class_wins_and_fp16_breaks_the_ten_bit_tie() {
        use PrecisionClass::*;
        assert_eq!(lowest([Fp32, Tf32, Fp16].into_iter()), Some(Fp16));
        assert_eq!(lowest([Fp32, Tf32].into_iter()), Some(Tf32));
        assert_eq!(lowest([Fp16, Bf16].into_iter()), Some(Bf16));
        assert_eq!(lowest(std::iter::empty()), None);
    }
}
