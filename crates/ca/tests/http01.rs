//! The HTTP-01 tester against real HTTP servers on loopback (axum on 127.0.0.1:0), with the
//! resolver pointing the challenge names at them.

#![cfg(not(madsim))]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use certus_ca::http01::{
    HTTP01_BODY_BYTES_MAX_DEFAULT, Http01Config, Http01Tester, Resolver, TestOutcome,
};

const NAME: &str = "www.example.com";
const TOKEN: &str = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA";
const KEY_AUTHORIZATION: &str =
    "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.nP1qzpXGymHBrUEepNY9HCsQk7K8KhOypzEt62jcerQ";

/// Serves `app` on a fresh loopback port until the test ends.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// A challenge server: at the token's path, `body` with `status` if the Host header is NAME
/// (else 421); anywhere else 404.
fn challenge_app(status: StatusCode, body: impl Into<String>) -> Router {
    let body: String = body.into();
    Router::new().route(
        "/.well-known/acme-challenge/{token}",
        get(
            move |Path(token): Path<String>, headers: HeaderMap| async move {
                if headers.get(header::HOST).and_then(|h| h.to_str().ok()) != Some(NAME) {
                    return (StatusCode::MISDIRECTED_REQUEST, "wrong Host").into_response();
                }
                if token != TOKEN {
                    return (StatusCode::NOT_FOUND, "no such token").into_response();
                }
                (status, body.clone()).into_response()
            },
        ),
    )
}

fn tester_for(address: SocketAddr, timeout: Duration) -> Http01Tester {
    Http01Tester::new(Http01Config {
        resolver: Resolver::Static(BTreeMap::from([(NAME.to_string(), address)])),
        timeout,
        body_bytes_max: HTTP01_BODY_BYTES_MAX_DEFAULT,
    })
}

async fn test_against(app: Router) -> TestOutcome {
    let address = serve(app).await;
    tester_for(address, Duration::from_secs(5))
        .test(NAME, TOKEN, KEY_AUTHORIZATION)
        .await
}

fn reason_of(outcome: TestOutcome) -> String {
    match outcome {
        TestOutcome::NotSatisfied { reason } => reason,
        TestOutcome::Satisfied => panic!("expected NotSatisfied"),
    }
}

#[tokio::test]
async fn the_key_authorization_served_with_200_is_satisfied() {
    let outcome = test_against(challenge_app(StatusCode::OK, KEY_AUTHORIZATION)).await;
    assert_eq!(outcome, TestOutcome::Satisfied);
}

#[tokio::test]
async fn the_name_is_matched_in_any_case() {
    let address = serve(challenge_app(StatusCode::OK, KEY_AUTHORIZATION)).await;
    let outcome = tester_for(address, Duration::from_secs(5))
        .test("WWW.Example.COM", TOKEN, KEY_AUTHORIZATION)
        .await;
    assert_eq!(outcome, TestOutcome::Satisfied);
}

#[tokio::test]
async fn trailing_whitespace_after_the_key_authorization_is_ignored() {
    let body = concat!(
        "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.nP1qzpXGymHBrUEepNY9HCsQk7K8KhOypzEt62jcerQ",
        " \r\n"
    );
    let outcome = test_against(challenge_app(StatusCode::OK, body)).await;
    assert_eq!(outcome, TestOutcome::Satisfied);
    let body = concat!(
        "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.nP1qzpXGymHBrUEepNY9HCsQk7K8KhOypzEt62jcerQ",
        "\n"
    );
    let outcome = test_against(challenge_app(StatusCode::OK, body)).await;
    assert_eq!(outcome, TestOutcome::Satisfied);
}

#[tokio::test]
async fn a_wrong_body_is_not_satisfied_and_the_reason_quotes_it() {
    let reason = reason_of(test_against(challenge_app(StatusCode::OK, "hello, world")).await);
    assert!(
        reason.starts_with(
            "http://www.example.com/.well-known/acme-challenge/\
             evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA: the body is not the key authorization"
        ),
        "{reason}"
    );
    assert!(
        reason.contains("got \"hello, world\" (12 bytes)"),
        "{reason}"
    );
    // Leading whitespace is not forgiven.
    let body = concat!(
        " evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.",
        "nP1qzpXGymHBrUEepNY9HCsQk7K8KhOypzEt62jcerQ"
    );
    let outcome = test_against(challenge_app(StatusCode::OK, body)).await;
    assert!(!outcome.is_satisfied());
}

#[tokio::test]
async fn a_404_is_not_satisfied() {
    // The server knows no such token.
    let address = serve(challenge_app(StatusCode::OK, KEY_AUTHORIZATION)).await;
    let outcome = tester_for(address, Duration::from_secs(5))
        .test(NAME, "another-token", KEY_AUTHORIZATION)
        .await;
    let reason = reason_of(outcome);
    assert!(
        reason.contains("HTTP 404 Not Found; expected 200"),
        "{reason}"
    );
    assert!(
        reason.contains("/acme-challenge/another-token:"),
        "{reason}"
    );
}

#[tokio::test]
async fn the_right_body_with_another_status_is_not_satisfied() {
    let reason =
        reason_of(test_against(challenge_app(StatusCode::ACCEPTED, KEY_AUTHORIZATION)).await);
    assert!(reason.contains("HTTP 202 Accepted"), "{reason}");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let app = Router::new().route(
        "/.well-known/acme-challenge/{token}",
        get(|| async {
            (
                StatusCode::FOUND,
                [(header::LOCATION, "https://www.example.com/elsewhere")],
                "",
            )
        }),
    );
    let reason = reason_of(test_against(app).await);
    assert!(
        reason.contains("HTTP 302 redirects to \"https://www.example.com/elsewhere\""),
        "{reason}"
    );
    assert!(reason.contains("does not follow redirects"), "{reason}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_not_satisfied() {
    let big = "x".repeat(HTTP01_BODY_BYTES_MAX_DEFAULT + 1);
    let reason = reason_of(test_against(challenge_app(StatusCode::OK, big)).await);
    assert!(
        reason.contains(&format!(
            "the body is larger than {HTTP01_BODY_BYTES_MAX_DEFAULT} bytes"
        )),
        "{reason}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_not_satisfied() {
    // A port that was just free: nobody listens on it any more.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let reason = reason_of(
        tester_for(address, Duration::from_secs(5))
            .test(NAME, TOKEN, KEY_AUTHORIZATION)
            .await,
    );
    assert!(
        reason.contains(&format!("could not connect to {NAME} ({address}: ")),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("refused"), "{reason}");
}

#[tokio::test]
async fn a_slow_server_hits_the_timeout() {
    let app = Router::new().route(
        "/.well-known/acme-challenge/{token}",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            KEY_AUTHORIZATION
        }),
    );
    let address = serve(app).await;
    let started = Instant::now();
    let reason = reason_of(
        tester_for(address, Duration::from_millis(300))
            .test(NAME, TOKEN, KEY_AUTHORIZATION)
            .await,
    );
    let elapsed = started.elapsed();
    assert!(
        reason.contains("no answer within 300ms (timed out while waiting for the response)"),
        "{reason}"
    );
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
}

/// The session daemon runs tests on spawned tasks.
#[tokio::test]
async fn the_tester_and_its_test_future_can_move_between_threads() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let tester = Http01Tester::new(Http01Config::default());
    send_sync(&tester);
    let test = tester.test(NAME, TOKEN, KEY_AUTHORIZATION);
    send(&test);
}

#[tokio::test]
async fn names_without_an_address_and_bad_tokens_are_not_satisfied() {
    let address = serve(challenge_app(StatusCode::OK, KEY_AUTHORIZATION)).await;
    let tester = tester_for(address, Duration::from_secs(5));
    let reason = reason_of(
        tester
            .test("other.example.com", TOKEN, KEY_AUTHORIZATION)
            .await,
    );
    assert!(
        reason.contains("no address is configured for other.example.com"),
        "{reason}"
    );
    let reason = reason_of(
        tester
            .test(NAME, "../../etc/passwd", KEY_AUTHORIZATION)
            .await,
    );
    assert!(
        reason.contains("outside the base64url alphabet"),
        "{reason}"
    );
    let reason = reason_of(tester.test("localhost", TOKEN, KEY_AUTHORIZATION).await);
    assert!(reason.contains("not a DNS name"), "{reason}");
}
