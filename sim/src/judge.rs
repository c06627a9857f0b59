//! Verdicts: one checker's judgement of one run, and the ways every checker builds one (a pass or
//! a failure with its detail, or a list of problems that fails when it is not empty).

use serde::{Deserialize, Serialize};

use crate::limits::PROBLEMS_NAMED_MAX;

/// One checker's judgement of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The checker.
    pub checker: String,
    /// Whether the invariant held.
    pub passed: bool,
    /// What it checked, or what broke it.
    pub detail: String,
}

impl Verdict {
    /// The invariant held; `detail` says what was checked.
    pub fn pass(checker: &str, detail: String) -> Verdict {
        Verdict {
            checker: checker.to_owned(),
            passed: true,
            detail,
        }
    }

    /// The invariant broke; `detail` says which records broke it.
    pub fn fail(checker: &str, detail: String) -> Verdict {
        Verdict {
            checker: checker.to_owned(),
            passed: false,
            detail,
        }
    }

    /// Passes with `passed_detail` when there are no `problems`; otherwise fails naming the first
    /// `PROBLEMS_NAMED_MAX` (ten) and counting the rest.
    pub fn of_problems(checker: &str, problems: Vec<String>, passed_detail: String) -> Verdict {
        if problems.is_empty() {
            return Verdict::pass(checker, passed_detail);
        }
        let count = problems.len();
        let mut detail: Vec<String> = problems.into_iter().take(PROBLEMS_NAMED_MAX).collect();
        if count > PROBLEMS_NAMED_MAX {
            detail.push(format!("... {} more", count - PROBLEMS_NAMED_MAX));
        }
        Verdict::fail(checker, detail.join("; "))
    }

    /// Passes with `passed_detail` when the clients saw no `violations`; otherwise fails naming
    /// every one (a client records a violation once, where it saw it).
    pub fn of_violations(checker: &str, violations: &[String], passed_detail: String) -> Verdict {
        if violations.is_empty() {
            Verdict::pass(checker, passed_detail)
        } else {
            Verdict::fail(checker, violations.join("; "))
        }
    }
}

/// Asserts that `verdict` passed and that its detail says `detail`.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_passes(verdict: &Verdict, detail: &str) {
    assert_verdict(verdict, true, detail);
}

/// Asserts that `verdict` failed and that its detail names `culprit`.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_fails(verdict: &Verdict, culprit: &str) {
    assert_verdict(verdict, false, culprit);
}

#[cfg(test)]
#[track_caller]
fn assert_verdict(verdict: &Verdict, passed: bool, says: &str) {
    assert_eq!(
        verdict.passed,
        passed,
        "{} should have {}: {}",
        verdict.checker,
        if passed { "passed" } else { "failed" },
        verdict.detail
    );
    assert!(
        verdict.detail.contains(says),
        "{}: {:?} does not say {says:?}",
        verdict.checker,
        verdict.detail
    );
}

#[cfg(test)]
mod tests {
    use super::{Verdict, assert_fails, assert_passes};
    use crate::limits::PROBLEMS_NAMED_MAX;

    #[test]
    fn no_problems_pass_with_what_was_checked() {
        let verdict = Verdict::of_problems("c", Vec::new(), "3 things checked".to_owned());
        assert_passes(&verdict, "3 things checked");
        let verdict = Verdict::of_violations("c", &[], "3 calls".to_owned());
        assert_passes(&verdict, "3 calls");
    }

    #[test]
    fn problems_fail_naming_the_first_ten_and_counting_the_rest() {
        let problems: Vec<String> = (1..=12).map(|n| format!("p{n}")).collect();
        let verdict = Verdict::of_problems("c", problems, "unused".to_owned());
        assert_fails(&verdict, "p1; p2");
        assert_fails(&verdict, &format!("p{PROBLEMS_NAMED_MAX}; ... 2 more"));
        assert!(!verdict.detail.contains("p11"), "{}", verdict.detail);
        assert!(!verdict.detail.contains("unused"), "{}", verdict.detail);
    }

    #[test]
    fn violations_fail_naming_every_one() {
        let violations: Vec<String> = (1..=12).map(|n| format!("v{n}")).collect();
        let verdict = Verdict::of_violations("c", &violations, "unused".to_owned());
        assert_fails(&verdict, "v1; v2");
        assert_fails(&verdict, "v11; v12");
        assert_eq!(verdict.checker, "c");
    }
}
