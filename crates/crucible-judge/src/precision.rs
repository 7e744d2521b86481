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
//! 2. the fingerprint: when the candidate's error *is* one emulation's (its `unexplained` ratio
//!    is at most [`EXPLAINED`]), that emulation's class. This is what tells TF32 from fp16,
//!    whose error magnitudes are the same: tensor cores truncate fp32 operands, casts round;
//! 3. as accurate as the reference (within [`MATCHES_REFERENCE`]): the reference's class;
//! 4. the magnitude: equivalent mantissa bits `10 + log2(rel_rms(rn10+out) / rel_rms)`, at least
//!    [`FP32_MIN_BITS`] is fp32, at least [`TEN_BIT_MIN_BITS`] is tf32 (a 10-bit error without a
//!    rounding's fingerprint: the conservative side of the fp16/tf32 ambiguity), below is bf16.
//!
//! A class is capped at the task's output dtype: on an fp16 task a 10-bit class is `fp16`, on a
//! bf16 task everything is `bf16`. The thresholds come from `scripts/precision-measure.py`; the
//! table is in docs/result-schema.md.

use crucible_result::{
    Emulation, ErrorVsF64, Finding, OutputPrecision, Precision, PrecisionClass, Severity, Timing,
};
use serde_json::Value;

/// An `unexplained` ratio at or below this is the emulation's fingerprint. Measured: the
/// matching emulation leaves at most 0.072 (CPU) / 0.005 (H200, Triton), but 0.68 for fp16
/// intermediates it does not model; an unrelated one at least 0.88, an honest fp32 error at
/// least 1.9.
pub const EXPLAINED: f64 = 0.5;

/// Fewer elements than this make the fingerprint a matter of chance (a scalar's error has no
/// direction to compare): only the magnitude counts.
pub const MIN_ELEMENTS_FOR_FINGERPRINT: u64 = 16;

/// A candidate whose error is at most this multiple of the reference's own is as precise as the
/// reference.
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
    /// `(emulation name, unexplained ratio)` for this computation's error.
    pub fingerprints: &'a [(&'a str, Option<f64>)],
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
    if observed.elements >= MIN_ELEMENTS_FOR_FINGERPRINT {
        let best = observed
            .fingerprints
            .iter()
            .filter_map(|&(name, ratio)| Some((name, ratio?, emulation_class(name)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((name, _, class)) = best.filter(|b| b.1 <= EXPLAINED) {
            return decided(class, &format!("emulation:{name}"));
        }
    }
    if let Some((reference_error, reference_class)) = reference
        && error <= MATCHES_REFERENCE * reference_error
    {
        return decided(reference_class, "matches-reference");
    }
    match observed.scale10.filter(|s| *s > 0.0) {
        // No 10-bit scale (the output is exact in 10 bits): nothing to compare the error with.
        None => decided(ceiling, "no-scale"),
        Some(scale) => {
            let bits = equivalent_bits(error, scale).unwrap_or(f64::NEG_INFINITY);
            let class = if bits >= FP32_MIN_BITS {
                PrecisionClass::Fp32
            } else if bits >= TEN_BIT_MIN_BITS {
                PrecisionClass::Tf32
            } else {
                PrecisionClass::Bf16
            };
            decided(class, "magnitude")
        }
    }
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

fn f64_field(v: &Value, key: &str) -> Option<f64> {
    v[key].as_f64().filter(|x| x.is_finite())
}

fn error_vs_f64(v: &Value) -> ErrorVsF64 {
    ErrorVsF64 {
        rel_rms: f64_field(v, "rel_rms"),
        max_norm: f64_field(v, "max_norm"),
    }
}

/// Parses one output of the referee's measurement and classifies it; `None` for an output
/// whose dtype has no precision class.
fn output(v: &Value) -> Option<OutputPrecision> {
    let dtype = v["dtype"].as_str()?.to_string();
    let ceiling = dtype_ceiling(&dtype)?;
    let emulations: Vec<Emulation> = v["emulations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some(Emulation {
                name: e["name"].as_str()?.to_string(),
                rel_rms: f64_field(e, "rel_rms"),
                unexplained: f64_field(e, "unexplained"),
                reference_unexplained: f64_field(e, "reference_unexplained"),
            })
        })
        .collect();
    let elements = v["elements"].as_u64().unwrap_or(0);
    let scale10 = emulations
        .iter()
        .find(|e| e.name == TEN_BIT_SCALE)
        .and_then(|e| e.rel_rms);
    let candidate = error_vs_f64(&v["candidate"]);
    let reference = error_vs_f64(&v["reference"]);
    let prints = |reference: bool| -> Vec<(&str, Option<f64>)> {
        emulations
            .iter()
            .map(|e| {
                let ratio = if reference {
                    e.reference_unexplained
                } else {
                    e.unexplained
                };
                (e.name.as_str(), ratio)
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
        index: v["index"].as_u64().unwrap_or(0) as u32,
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

/// The measurement the referee replied with (`measure_precision`), classified.
pub fn from_reply(reply: &Value, trial: u32) -> Precision {
    if let Some(reason) = reply["unmeasured"].as_str() {
        return Precision {
            trial,
            unmeasured: Some(reason.to_string()),
            ..Precision::default()
        };
    }
    let outputs: Vec<OutputPrecision> = reply["outputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(output)
        .collect();
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
            "its error is the truncation of the operands to 10 mantissa bits (TF32 tensor cores: \
             Triton's default `tl.dot` on fp32 operands; `input_precision=\"ieee\"` keeps fp32)"
        }
        "rn10" | "rn10+out" | "out10" => {
            "its error is the rounding of the operands (or outputs) to 10 mantissa bits, nearest \
             even: fp16 casts"
        }
        "rn7" | "rn7+out" | "out7" => {
            "its error is the rounding of the operands (or outputs) to 7 mantissa bits: bf16 casts"
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

    /// The error a 10-bit computation (operands and output) makes on randn matmul inputs, and on
    /// rand (positive) ones, from scripts/precision-measure.py (CPU, K=4096).
    const SCALE_RANDN: f64 = 3.6e-4;
    const SCALE_RAND: f64 = 2.24e-4;

    fn observed<'a>(
        rel_rms: f64,
        prints: &'a [(&'a str, Option<f64>)],
        scale10: f64,
    ) -> Observed<'a> {
        Observed {
            rel_rms: Some(rel_rms),
            fingerprints: prints,
            elements: 65536,
            scale10: Some(scale10),
        }
    }

    fn class_of(rel_rms: f64, prints: &[(&str, Option<f64>)], scale10: f64) -> PrecisionClass {
        classify(
            &observed(rel_rms, prints, scale10),
            PrecisionClass::Fp32,
            Some((8.12e-8, PrecisionClass::Fp32)),
        )
        .class
    }

    #[test]
    fn measured_rows_classify_as_their_precision() {
        // Rows of the measured table (matmul K=4096, CPU): rel_rms and unexplained ratios.
        let fp32 = [
            ("out10", Some(2.76e3)),
            ("rn10", Some(68.5)),
            ("rz10", Some(8.02e3)),
            ("rn7", Some(544.0)),
        ];
        assert_eq!(class_of(8.12e-8, &fp32, SCALE_RAND), PrecisionClass::Fp32);
        // Sequential fp32 accumulation over 16384 positive terms: 13x torch's error, 17.1 bits.
        let seq = [
            ("rn10", Some(1.89)),
            ("rz10", Some(388.0)),
            ("rn7", Some(12.9)),
        ];
        assert_eq!(class_of(1.68e-6, &seq, SCALE_RAND), PrecisionClass::Fp32);
        // fp16 operands with fp32 accumulation on positive inputs: the error averages down to
        // 15.3 equivalent bits, but it is the rn10 rounding.
        let fp16 = [
            ("out10", Some(40.3)),
            ("rn10", Some(0.0146)),
            ("rz10", Some(117.0)),
            ("rn7", Some(8.06)),
        ];
        assert_eq!(class_of(5.57e-6, &fp16, SCALE_RAND), PrecisionClass::Fp16);
        // Triton's default tl.dot on an H200: truncated operands.
        let tf32 = [
            ("rn10", Some(1.0)),
            ("rz10", Some(4.19e-4)),
            ("rn7", Some(1.09)),
        ];
        assert_eq!(class_of(6.47e-4, &tf32, SCALE_RAND), PrecisionClass::Tf32);
        // bf16 operands on positive inputs: 12.3 bits by magnitude, the rn7 fingerprint.
        let bf16 = [
            ("rn10", Some(1.01)),
            ("rz10", Some(14.7)),
            ("rn7", Some(0.00163)),
        ];
        assert_eq!(class_of(4.42e-5, &bf16, SCALE_RAND), PrecisionClass::Bf16);
        // Everything in fp16 / bf16 (outputs rounded too).
        let fp16_all = [
            ("rn10", Some(0.578)),
            ("rn10+out", Some(0.0382)),
            ("rn7", Some(6.65)),
        ];
        assert_eq!(
            class_of(3.6e-4, &fp16_all, SCALE_RANDN),
            PrecisionClass::Fp16
        );
        let bf16_all = [("rn7", Some(0.577)), ("rn7+out", Some(0.0268))];
        assert_eq!(
            class_of(2.89e-3, &bf16_all, SCALE_RANDN),
            PrecisionClass::Bf16
        );
    }

    #[test]
    fn magnitude_decides_without_a_fingerprint() {
        let none: [(&str, Option<f64>); 0] = [];
        // gelu computed in fp16 intermediates: no emulation explains it, 9.8 bits.
        let d = classify(
            &observed(4.32e-4, &none, 3.8e-4),
            PrecisionClass::Fp32,
            None,
        );
        assert_eq!(
            (d.class, d.evidence.as_str()),
            (PrecisionClass::Tf32, "magnitude")
        );
        assert!((d.bits.unwrap() - 9.81).abs() < 0.01);
        // bf16 intermediates: 6.8 bits.
        let d = classify(&observed(3.5e-3, &none, 3.8e-4), PrecisionClass::Fp32, None);
        assert_eq!(d.class, PrecisionClass::Bf16);
        // The thresholds themselves.
        let at = |bits: f64| 3.8e-4 / 2f64.powf(bits - 10.0);
        let class = |bits| {
            classify(
                &observed(at(bits), &none, 3.8e-4),
                PrecisionClass::Fp32,
                None,
            )
            .class
        };
        assert_eq!(class(FP32_MIN_BITS + 0.01), PrecisionClass::Fp32);
        assert_eq!(class(FP32_MIN_BITS - 0.01), PrecisionClass::Tf32);
        assert_eq!(class(TEN_BIT_MIN_BITS + 0.01), PrecisionClass::Tf32);
        assert_eq!(class(TEN_BIT_MIN_BITS - 0.01), PrecisionClass::Bf16);
    }

    #[test]
    fn a_fingerprint_needs_enough_elements_and_a_close_match() {
        let prints = [("rn10", Some(0.2))];
        let mut scalar = observed(1e-7, &prints, 3.6e-4);
        scalar.elements = 1;
        assert_eq!(
            classify(&scalar, PrecisionClass::Fp32, None).class,
            PrecisionClass::Fp32
        );
        let loose = [("rn10", Some(EXPLAINED + 0.01))];
        assert_eq!(
            classify(&observed(1e-7, &loose, 3.6e-4), PrecisionClass::Fp32, None).class,
            PrecisionClass::Fp32
        );
    }

    #[test]
    fn half_tasks_cap_at_their_dtype() {
        // An honest fp16 candidate: output rounding, like the reference's own.
        let prints = [("rn10", Some(1.0)), ("rn7", Some(7.9))];
        let fp16 = classify(
            &observed(2.3e-4, &prints, 2.2e-4),
            PrecisionClass::Fp16,
            Some((2.2e-4, PrecisionClass::Fp16)),
        );
        assert_eq!(fp16.class, PrecisionClass::Fp16);
        // bf16 arithmetic on an fp16 task is below it.
        let bf16 = [("rn10", Some(1.0)), ("rn7", Some(0.01))];
        let d = classify(
            &observed(1.8e-3, &bf16, 2.2e-4),
            PrecisionClass::Fp16,
            Some((2.2e-4, PrecisionClass::Fp16)),
        );
        assert_eq!(d.class, PrecisionClass::Bf16);
        // Nothing on a bf16 task is better than bf16; exact outputs are the task's class.
        let d = classify(&observed(0.0, &[], 1e-3), PrecisionClass::Bf16, None);
        assert_eq!(
            (d.class, d.evidence.as_str()),
            (PrecisionClass::Bf16, "exact")
        );
    }

    fn reply(dtype: &str, candidate: f64, reference: f64, prints: &[(&str, f64, f64)]) -> Value {
        let emulations: Vec<Value> = prints
            .iter()
            .map(|(name, unexplained, reference_unexplained)| {
                json!({"name": name, "rel_rms": 3.6e-4, "unexplained": unexplained,
                       "reference_unexplained": reference_unexplained})
            })
            .collect();
        json!({"outputs": [{
            "index": 0, "dtype": dtype, "elements": 1024,
            "candidate": {"rel_rms": candidate, "max_norm": 1e-3},
            "reference": {"rel_rms": reference, "max_norm": 1e-6},
            "emulations": emulations,
        }]})
    }

    #[test]
    fn replies_become_classes_findings_and_matched_speedups() {
        let fp16_cast = reply(
            "float32",
            2.9e-4,
            1.4e-7,
            &[
                ("rn10+out", 0.7, 2e3),
                ("rn10", 0.0005, 2e3),
                ("rz10", 2.99, 5e3),
            ],
        );
        let p = from_reply(&fp16_cast, 0);
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
        };
        let timing = Timing {
            reference: stats(2.0),
            candidate: stats(0.4),
            warmup: 5,
            l2_flush_bytes: 0,
            candidate_phase_wall_s: 0.1,
            reference_matched: Some(stats(0.2)),
            reference_matched_class: Some(PrecisionClass::Fp16),
        };
        let matched = matched_speedup(Some(5.0), Some(&timing), Some(&p)).unwrap();
        assert_eq!(matched, (0.5, PrecisionClass::Fp16));
        assert_eq!(matched_speedup(None, Some(&timing), Some(&p)), None);
        assert_eq!(matched_speedup(Some(5.0), Some(&timing), None), None);

        // An honest candidate: fp32, no finding, matched speedup = speedup, no second timing.
        let honest = from_reply(&reply("float32", 2e-7, 1.4e-7, &[("rn10", 2e3, 2e3)]), 0);
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
            &reply(
                "float32",
                7.7e-4,
                2.9e-4,
                &[("rn10", 1.13, 0.001), ("rz10", 0.0003, 3.0)],
            ),
            0,
        );
        assert_eq!(tf32_reference.reference_class, Some(PrecisionClass::Tf32));
        assert_eq!(tf32_reference.class, Some(PrecisionClass::Tf32));
        assert!(downgrade_finding(&tf32_reference).is_none());

        let unmeasured = from_reply(&json!({"unmeasured": "no float64 conv3d"}), 0);
        assert_eq!(unmeasured.class, None);
        assert_eq!(unmeasured.unmeasured.as_deref(), Some("no float64 conv3d"));
        assert!(downgrade_finding(&unmeasured).is_none());
        let integer = from_reply(&reply("int64", 0.0, 0.0, &[]), 0);
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
