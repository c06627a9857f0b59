//! The upstream protocol's triage, pure: what each answer means for polling, and the checks on
//! order ids, order requests and issued chains.

use certus_ca::limits::{UPSTREAM_CHAIN_CERTS_MAX, UPSTREAM_NAMES_MAX, UPSTREAM_REASON_CHARS_MAX};
use certus_ca::poller::Step;
use certus_ca::upstream::{
    IssuedChain, OrderId, OrderRequest, Submitted, read_order_created, read_order_status,
};
use rcgen::{CertificateParams, KeyPair};

fn names() -> Vec<String> {
    vec!["example.com".to_owned()]
}

fn certificate_pem() -> String {
    let key = KeyPair::generate().expect("key");
    CertificateParams::new(names())
        .expect("params")
        .self_signed(&key)
        .expect("certificate")
        .pem()
}

fn csr_der() -> Vec<u8> {
    let key = KeyPair::generate().expect("key");
    CertificateParams::new(names())
        .expect("params")
        .serialize_request(&key)
        .expect("CSR")
        .der()
        .to_vec()
}

fn status(http_status: u16, body: &str) -> Step<IssuedChain> {
    read_order_status(http_status, body.as_bytes())
}

fn failure(step: Step<IssuedChain>) -> String {
    match step {
        Step::Failed(reason) => reason,
        other => panic!("expected a permanent failure, got {other:?}"),
    }
}

fn transient(step: Step<IssuedChain>) -> String {
    match step {
        Step::Transient(error) => error,
        other => panic!("expected a transient failure, got {other:?}"),
    }
}

#[test]
fn pending_and_processing_keep_polling() {
    for word in ["pending", "processing"] {
        let body = format!(r#"{{"status": "{word}", "extra": 1}}"#);
        assert_eq!(status(200, &body), Step::Pending, "{word}");
    }
}

#[test]
fn issued_and_completed_carry_the_chain() {
    let pem = certificate_pem();
    for word in ["issued", "completed"] {
        let body = serde_json::json!({"status": word, "certificate": pem}).to_string();
        let Step::Ready(chain) = status(200, &body) else {
            panic!("{word}: not ready");
        };
        assert_eq!(chain.pem(), pem);
        assert_eq!(chain.der().len(), 1);
        assert_eq!(chain.leaf_der(), chain.der()[0].as_slice());
    }
}

#[test]
fn rejected_denied_and_failed_are_permanent_with_the_reason() {
    for word in ["rejected", "denied", "failed"] {
        let body = serde_json::json!({"status": word, "reason": "domain not validated"});
        let reason = failure(status(201, &body.to_string()));
        assert!(reason.contains("domain not validated"), "{reason}");
        assert!(reason.contains(word), "{reason}");
    }
    let reason = failure(status(200, r#"{"status": "denied"}"#));
    assert!(reason.contains("no reason given"), "{reason}");
}

#[test]
fn a_success_with_a_body_that_does_not_parse_is_permanent() {
    for body in [
        "",
        "<html>gateway</html>",
        r#"{"state": "pending"}"#,
        r#"{"status": 3}"#,
    ] {
        let reason = failure(status(200, body));
        assert!(reason.contains("does not parse"), "{body:?}: {reason}");
    }
    let reason = failure(status(200, r#"{"status": "Pending"}"#));
    assert!(reason.contains("unknown order status"), "{reason}");
    let reason = failure(status(200, r#"{"status": "issued"}"#));
    assert!(reason.contains("no certificate"), "{reason}");
    let reason = failure(status(
        200,
        r#"{"status": "issued", "certificate": "MIIB"}"#,
    ));
    assert!(reason.contains("no PEM CERTIFICATE block"), "{reason}");
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let body = serde_json::json!({"status": "issued", "certificate": garbage}).to_string();
    let reason = failure(status(200, &body));
    assert!(reason.contains("does not parse"), "{reason}");
}

#[test]
fn rate_limits_and_server_errors_are_transient() {
    for http_status in [429, 500, 502, 503, 504, 599] {
        let error = transient(status(http_status, "busy"));
        assert_eq!(error, format!("HTTP {http_status}: busy"));
    }
    assert_eq!(transient(status(503, "")), "HTTP 503");
}

#[test]
fn other_statuses_are_permanent() {
    for http_status in [300, 302, 400, 401, 403, 404, 408, 409, 451] {
        let reason = failure(status(http_status, r#"{"reason": "no such order"}"#));
        assert!(
            reason.starts_with(&format!("HTTP {http_status}: ")),
            "{reason}"
        );
    }
}

#[test]
fn a_reason_is_cut_to_its_bound() {
    let long = "x".repeat(10 * UPSTREAM_REASON_CHARS_MAX);
    let reason = failure(status(400, &long));
    assert!(
        reason.chars().count() < UPSTREAM_REASON_CHARS_MAX + 20,
        "{}",
        reason.len()
    );
    let body = serde_json::json!({"status": "rejected", "reason": "é".repeat(2 * UPSTREAM_REASON_CHARS_MAX)});
    let reason = failure(status(200, &body.to_string()));
    assert!(reason.ends_with('…'), "cut on a character boundary");
}

#[test]
fn an_accepted_order_carries_a_url_safe_id() {
    assert_eq!(
        read_order_created(201, br#"{"id": "ord-1.a_b~c"}"#),
        Submitted::Accepted(OrderId::new("ord-1.a_b~c").expect("valid"))
    );
    assert_eq!(
        read_order_created(200, br#"{"id": "42", "status": "pending"}"#),
        Submitted::Accepted(OrderId::new("42").expect("valid"))
    );
    for body in [
        r#"{"id": "../admin"}"#,
        r#"{"id": ""}"#,
        r#"{"id": "a b"}"#,
        r#"{"order": "1"}"#,
        "ok",
    ] {
        assert!(
            matches!(
                read_order_created(201, body.as_bytes()),
                Submitted::Refused(_)
            ),
            "{body}"
        );
    }
    let long = serde_json::json!({"id": "a".repeat(129)}).to_string();
    assert!(matches!(
        read_order_created(201, long.as_bytes()),
        Submitted::Refused(_)
    ));
    assert_eq!(
        read_order_created(503, b"later"),
        Submitted::Transient("HTTP 503: later".to_owned())
    );
    assert_eq!(
        read_order_created(429, b""),
        Submitted::Transient("HTTP 429".to_owned())
    );
    assert_eq!(
        read_order_created(400, b"bad CSR"),
        Submitted::Refused("HTTP 400: bad CSR".to_owned())
    );
}

#[test]
fn an_order_request_is_checked_before_anything_is_sent() {
    let csr = csr_der();
    let request = OrderRequest::new(csr.clone(), names(), "session-1").expect("valid");
    assert_eq!(request.csr_der(), csr.as_slice());
    assert_eq!(request.names(), names().as_slice());
    assert_eq!(request.idempotency_key(), "session-1");

    let error = OrderRequest::new(b"not a CSR".to_vec(), names(), "k").expect_err("bad CSR");
    assert!(error.contains("does not parse as PKCS#10"), "{error}");
    let error = OrderRequest::new(Vec::new(), names(), "k").expect_err("empty CSR");
    assert!(error.contains("0 bytes"), "{error}");
    let error = OrderRequest::new(vec![0; 70_000], names(), "k").expect_err("huge CSR");
    assert!(error.contains("70000 bytes"), "{error}");
    let error = OrderRequest::new(csr.clone(), Vec::new(), "k").expect_err("no names");
    assert!(error.contains("0 names"), "{error}");
    let many = (0..=UPSTREAM_NAMES_MAX)
        .map(|n| format!("n{n}.example"))
        .collect();
    let error = OrderRequest::new(csr.clone(), many, "k").expect_err("too many names");
    assert!(error.contains("101 names"), "{error}");
    let error = OrderRequest::new(csr.clone(), vec!["a b".to_owned()], "k").expect_err("space");
    assert!(error.contains("visible ASCII"), "{error}");
    for key in ["", "line\nbreak", &"k".repeat(129)] {
        let error = OrderRequest::new(csr.clone(), names(), key).expect_err("bad key");
        assert!(error.contains("idempotency key"), "{error}");
    }
}

#[test]
fn a_chain_is_bounded() {
    let pem = certificate_pem();
    let two = format!("{pem}{pem}");
    assert_eq!(IssuedChain::from_pem(&two).expect("two").der().len(), 2);
    let too_many = pem.repeat(UPSTREAM_CHAIN_CERTS_MAX + 1);
    let error = IssuedChain::from_pem(&too_many).expect_err("too many");
    assert!(error.contains("11 certificates"), "{error}");
    assert!(IssuedChain::from_pem("").is_err());
}

#[test]
fn an_order_id_round_trips_through_serde_and_is_checked_when_read() {
    let id = OrderId::new("ord-1").expect("valid");
    let json = serde_json::to_string(&id).expect("serializes");
    assert_eq!(json, r#""ord-1""#);
    assert_eq!(serde_json::from_str::<OrderId>(&json).expect("reads"), id);
    let error = serde_json::from_str::<OrderId>(r#""../admin""#).expect_err("checked");
    assert!(error.to_string().contains("order id"), "{error}");
}
