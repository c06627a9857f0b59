//! The JSON resources' exact shapes, and RFC 3339 timestamps.

use std::time::{Duration, UNIX_EPOCH};

use certus_acme::limits::RFC3339_MS_MAX;
use certus_acme::wire::{
    AccountObject, AccountStatus, AccountUpdate, AuthorizationObject, AuthorizationStatus,
    ChallengeObject, ChallengeStatus, ChallengeType, Directory, DirectoryMeta, Finalize,
    Identifier, KeyChange, NewAccount, NewOrder, OrderObject, OrderStatus, RevokeCert, rfc3339,
};
use certus_acme::{Problem, ProblemType};
use proptest::prelude::*;
use serde_json::json;

#[test]
fn rfc3339_known_values() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_798_761_600_000), "2027-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
    assert_eq!(rfc3339(4_107_456_000_000), "2100-02-28T00:00:00Z");
    assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00Z");
    assert_eq!(rfc3339(RFC3339_MS_MAX), "9999-12-31T23:59:59Z");
}

#[test]
fn rfc3339_refuses_five_digit_years() {
    let refused = std::panic::catch_unwind(|| rfc3339(RFC3339_MS_MAX + 1));
    assert!(refused.is_err());
}

/// httpdate's IMF-fixdate ("Tue, 29 Feb 2000 00:00:00 GMT") rewritten as RFC 3339.
fn via_httpdate(seconds: u64) -> String {
    let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(seconds));
    let parts: Vec<&str> = text.split(' ').collect();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|name| *name == parts[2])
    .unwrap()
        + 1;
    format!("{}-{month:02}-{}T{}Z", parts[3], parts[1], parts[4])
}

proptest! {
    #[test]
    fn rfc3339_agrees_with_httpdate(seconds in 0u64..=RFC3339_MS_MAX / 1000, ms in 0u64..1000) {
        prop_assert_eq!(rfc3339(seconds * 1000 + ms), via_httpdate(seconds));
    }
}

#[test]
fn directory_shape() {
    let directory = Directory {
        new_nonce: "https://a/new-nonce".into(),
        new_account: "https://a/new-account".into(),
        new_order: "https://a/new-order".into(),
        revoke_cert: "https://a/revoke-cert".into(),
        key_change: "https://a/key-change".into(),
        meta: Some(DirectoryMeta {
            terms_of_service: Some("https://a/terms".into()),
            caa_identities: Some(vec!["acme.example".into()]),
            ..DirectoryMeta::default()
        }),
    };
    assert_eq!(
        serde_json::to_value(&directory).unwrap(),
        json!({
            "newNonce": "https://a/new-nonce",
            "newAccount": "https://a/new-account",
            "newOrder": "https://a/new-order",
            "revokeCert": "https://a/revoke-cert",
            "keyChange": "https://a/key-change",
            "meta": {"termsOfService": "https://a/terms", "caaIdentities": ["acme.example"]}
        })
    );
    let bare = Directory {
        meta: None,
        ..directory
    };
    assert!(serde_json::to_value(&bare).unwrap().get("meta").is_none());
}

#[test]
fn requests_read_camel_case_and_ignore_unknown_members() {
    let account: NewAccount = serde_json::from_value(json!({
        "contact": ["mailto:a@example.org"],
        "termsOfServiceAgreed": true,
        "onlyReturnExisting": false,
        "someExtension": {"x": 1}
    }))
    .unwrap();
    assert_eq!(
        account.contact.as_deref(),
        Some(&["mailto:a@example.org".to_owned()][..])
    );
    assert_eq!(account.terms_of_service_agreed, Some(true));
    assert_eq!(account.only_return_existing, Some(false));
    assert_eq!(account.external_account_binding, None);
    let empty: NewAccount = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, NewAccount::default());

    let update: AccountUpdate = serde_json::from_value(json!({"status": "deactivated"})).unwrap();
    assert_eq!(update.status, Some(AccountStatus::Deactivated));
    assert!(serde_json::from_value::<AccountUpdate>(json!({"status": "Deactivated"})).is_err());

    let order: NewOrder = serde_json::from_value(json!({
        "identifiers": [{"type": "dns", "value": "example.org"}, {"type": "ip", "value": "192.0.2.1"}],
        "notAfter": "2027-01-01T00:00:00Z"
    }))
    .unwrap();
    assert_eq!(order.identifiers[0], Identifier::dns("example.org"));
    assert_eq!(order.identifiers[1].kind, "ip");
    assert_eq!(order.not_after.as_deref(), Some("2027-01-01T00:00:00Z"));
    assert_eq!(order.not_before, None);
    assert!(serde_json::from_value::<NewOrder>(json!({"notAfter": "x"})).is_err());

    let finalize: Finalize = serde_json::from_value(json!({"csr": "MIIB"})).unwrap();
    assert_eq!(finalize.csr_der().unwrap(), [0x30, 0x82, 0x01]);
    let revoke: RevokeCert =
        serde_json::from_value(json!({"certificate": "MIIB", "reason": 4})).unwrap();
    assert_eq!(revoke.reason, Some(4));
    assert_eq!(revoke.certificate_der().unwrap(), [0x30, 0x82, 0x01]);
    assert!(Finalize { csr: "MII=".into() }.csr_der().is_err());

    let change: KeyChange =
        serde_json::from_value(json!({"account": "https://a/acct/1", "oldKey": {"kty": "OKP"}}))
            .unwrap();
    assert_eq!(change.old_key, json!({"kty": "OKP"}));
}

#[test]
fn objects_leave_absent_members_out() {
    let account = AccountObject {
        status: AccountStatus::Valid,
        contact: vec![],
        orders: "https://a/acct/1/orders".into(),
        terms_of_service_agreed: None,
    };
    assert_eq!(
        serde_json::to_value(&account).unwrap(),
        json!({"status": "valid", "contact": [], "orders": "https://a/acct/1/orders"})
    );

    let order = OrderObject {
        status: OrderStatus::Pending,
        expires: Some(rfc3339(1_798_761_600_000)),
        identifiers: vec![Identifier::dns("example.org")],
        not_before: None,
        not_after: None,
        error: None,
        authorizations: vec!["https://a/authz/1".into()],
        finalize: "https://a/order/1/finalize".into(),
        certificate: None,
    };
    assert_eq!(
        serde_json::to_value(&order).unwrap(),
        json!({
            "status": "pending",
            "expires": "2027-01-01T00:00:00Z",
            "identifiers": [{"type": "dns", "value": "example.org"}],
            "authorizations": ["https://a/authz/1"],
            "finalize": "https://a/order/1/finalize"
        })
    );
    let invalid = OrderObject {
        status: OrderStatus::Invalid,
        error: Some(Problem::new(ProblemType::Unauthorized, "no")),
        ..order
    };
    let value = serde_json::to_value(&invalid).unwrap();
    assert_eq!(value["status"], "invalid");
    assert_eq!(
        value["error"]["type"],
        "urn:ietf:params:acme:error:unauthorized"
    );
    assert_eq!(
        serde_json::from_value::<OrderObject>(value).unwrap(),
        invalid
    );

    let authorization = AuthorizationObject {
        identifier: Identifier::dns("example.org"),
        status: AuthorizationStatus::Valid,
        expires: None,
        challenges: vec![ChallengeObject {
            kind: ChallengeType::Http01,
            url: "https://a/chall/1".into(),
            status: ChallengeStatus::Valid,
            token: "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA".into(),
            validated: Some(rfc3339(0)),
            error: None,
        }],
        wildcard: Some(false),
    };
    assert_eq!(
        serde_json::to_value(&authorization).unwrap(),
        json!({
            "identifier": {"type": "dns", "value": "example.org"},
            "status": "valid",
            "challenges": [{
                "type": "http-01",
                "url": "https://a/chall/1",
                "status": "valid",
                "token": "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA",
                "validated": "1970-01-01T00:00:00Z"
            }],
            "wildcard": false
        })
    );
}

#[test]
fn statuses_are_lowercase_strings() {
    let names = |value: serde_json::Value| value.to_string();
    assert_eq!(
        names(json!([
            OrderStatus::Pending,
            OrderStatus::Ready,
            OrderStatus::Processing,
            OrderStatus::Valid,
            OrderStatus::Invalid
        ])),
        r#"["pending","ready","processing","valid","invalid"]"#
    );
    assert_eq!(
        names(json!([
            AuthorizationStatus::Pending,
            AuthorizationStatus::Valid,
            AuthorizationStatus::Invalid,
            AuthorizationStatus::Deactivated,
            AuthorizationStatus::Expired,
            AuthorizationStatus::Revoked
        ])),
        r#"["pending","valid","invalid","deactivated","expired","revoked"]"#
    );
    assert_eq!(
        names(json!([
            AccountStatus::Valid,
            AccountStatus::Deactivated,
            AccountStatus::Revoked
        ])),
        r#"["valid","deactivated","revoked"]"#
    );
    assert_eq!(
        names(json!([
            ChallengeType::Http01,
            ChallengeType::Dns01,
            ChallengeType::TlsAlpn01
        ])),
        r#"["http-01","dns-01","tls-alpn-01"]"#
    );
}
