//! The ACME resources under `/acme/` (RFC 8555 §7): the directory, nonces, accounts, orders,
//! authorizations, challenges, certificates, revocation and the CRL.
//!
//! Every POST is a JWS (`application/jose+json`) whose nonce, URL and signature are checked
//! before anything else is read: a nonce this node issued and nobody used, the URL the request
//! came to (scheme, `Host` and path), and the signature with the key the request names — its own
//! `jwk` for a new account or a revocation by the certificate's key, else the key of the account
//! its `kid` names, read from the replicated state. Every answer carries a fresh `Replay-Nonce`
//! and a `Link` to the directory; every refusal is an RFC 8555 §6.7 problem document.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use certus_acme::jwk::Jwk;
use certus_acme::jws::{KeyRef, ParsedJws};
use certus_acme::problem::{Problem, ProblemType};
use certus_core::acme::{
    Account, AccountId, AccountKey, AccountStatus, AcmeCommand, AcmeError, AcmeReply,
    AuthorizationStatus, ChallengeStatus, Order, OrderId, OrderStatus,
};
use certus_core::{ChallengeToken, Command, DnsName, Response as CoreResponse};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::acme::AcmeServer;
use crate::errors::ServiceError;
use crate::limits::{ACME_CLUSTER_WAIT, ACME_ORDERS_PAGE_MAX};
use crate::raft::replica::Replica;
use crate::random::fill_random;

/// The pause between two tries of a read or write while the cluster has no leader.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// What every handler gets.
#[derive(Debug, Clone)]
struct Acme {
    replica: Arc<Replica>,
    server: Arc<AcmeServer>,
}

/// The ACME routes of one node.
pub(crate) fn router(replica: Arc<Replica>, server: Arc<AcmeServer>) -> Router {
    Router::new()
        .route("/acme/directory", get(directory))
        .route("/acme/new-nonce", get(new_nonce).head(new_nonce))
        .route("/acme/new-account", post(new_account))
        .route("/acme/new-order", post(new_order))
        .route("/acme/revoke-cert", post(revoke_cert))
        .route("/acme/key-change", post(key_change))
        .route("/acme/account/{id}", post(account))
        .route("/acme/account/{id}/orders", post(account_orders))
        .route("/acme/order/{id}", post(order))
        .route("/acme/order/{id}/finalize", post(finalize))
        .route("/acme/authz/{order}/{position}", post(authorization))
        .route("/acme/challenge/{order}/{position}", post(challenge))
        .route("/acme/certificate/{order}", post(certificate))
        .route("/acme/crl", get(crl))
        // A method a resource does not answer is a problem document too, with a nonce. Set
        // here, before the node's router merges these routes: its own 405 fills only routes
        // that have none.
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(Acme { replica, server })
}

async fn method_not_allowed(
    State(acme): State<Acme>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let base = base_url(&acme.server, &headers).ok();
    let problem = Problem::with_status(
        ProblemType::Malformed,
        format!(
            "{method} is not a method this ACME resource answers (resources take POST; the directory, nonces and the CRL GET)"
        ),
        405,
    );
    answer(&acme, base.as_deref(), Err(problem.into()))
}

/// A refusal, as a problem document with its status, and when a retry may succeed (seconds,
/// sent as `Retry-After`).
struct Refusal(Problem, Option<u64>);

impl From<Problem> for Refusal {
    fn from(problem: Problem) -> Refusal {
        Refusal(problem, None)
    }
}

impl From<ServiceError> for Refusal {
    fn from(error: ServiceError) -> Refusal {
        // The cluster could not answer now (no leader, stopping): the client may retry.
        Refusal(
            Problem::with_status(
                ProblemType::ServerInternal,
                format!("the cluster cannot answer now: {error}"),
                503,
            ),
            Some(1),
        )
    }
}

impl From<AcmeError> for Refusal {
    fn from(error: AcmeError) -> Refusal {
        let detail = error.to_string();
        Refusal::from(match error {
            AcmeError::InvalidText(_) | AcmeError::Malformed(_) => {
                Problem::new(ProblemType::Malformed, detail)
            }
            AcmeError::ChallengeState { .. } => Problem::new(ProblemType::Malformed, detail),
            AcmeError::NoAccount => Problem::new(ProblemType::AccountDoesNotExist, detail),
            AcmeError::Deactivated(_) => Problem::new(ProblemType::Unauthorized, detail),
            AcmeError::NoOrder(_) | AcmeError::NoAuthorization { .. } => Problem::not_found(detail),
            AcmeError::NotReady { .. } => Problem::new(ProblemType::OrderNotReady, detail),
            AcmeError::KeyInUse(_) => Problem::with_status(ProblemType::Malformed, detail, 409),
            AcmeError::RateLimited { .. } => Problem::new(ProblemType::RateLimited, detail),
            AcmeError::AlreadyRevoked(_) => Problem::new(ProblemType::AlreadyRevoked, detail),
            AcmeError::Session(_) => Problem::new(ProblemType::ServerInternal, detail),
        })
    }
}

type Answer = Result<Response, Refusal>;

/// Where this request's resources live: scheme and `Host`.
fn base_url(server: &AcmeServer, headers: &HeaderMap) -> Result<String, Refusal> {
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .filter(|host| !host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| Problem::new(ProblemType::Malformed, "the request has no Host header"))?;
    Ok(format!("{}://{host}", server.scheme()))
}

/// Adds what every ACME answer carries: a fresh nonce, the directory link, no caching.
fn finish(acme: &Acme, base: Option<&str>, mut response: Response) -> Response {
    let headers = response.headers_mut();
    if let Ok(nonce) = HeaderValue::from_str(&acme.server.new_nonce()) {
        headers.insert("replay-nonce", nonce);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(base) = base
        && let Ok(link) = HeaderValue::from_str(&format!("<{base}/acme/directory>;rel=\"index\""))
    {
        headers.append(header::LINK, link);
    }
    response
}

fn answer(acme: &Acme, base: Option<&str>, result: Answer) -> Response {
    let response = match result {
        Ok(response) => response,
        Err(Refusal(problem, retry_after_s)) => {
            let response = problem_response(&problem);
            match retry_after_s {
                Some(seconds) => with_header(response, header::RETRY_AFTER, &seconds.to_string()),
                None => response,
            }
        }
    };
    finish(acme, base, response)
}

fn problem_response(problem: &Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, problem.to_json().to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn with_header(mut response: Response, name: header::HeaderName, value: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
    response
}

async fn directory(State(acme): State<Acme>, headers: HeaderMap) -> Response {
    let base = match base_url(&acme.server, &headers) {
        Ok(base) => base,
        Err(refusal) => return answer(&acme, None, Err(refusal)),
    };
    let body = json!({
        "newNonce": format!("{base}/acme/new-nonce"),
        "newAccount": format!("{base}/acme/new-account"),
        "newOrder": format!("{base}/acme/new-order"),
        "revokeCert": format!("{base}/acme/revoke-cert"),
        "keyChange": format!("{base}/acme/key-change"),
        "meta": {
            "website": "https://example.invalid/certus",
            "externalAccountRequired": false,
        },
    });
    // The directory is the one resource clients fetch without a nonce; it still gets one.
    answer(&acme, Some(&base), Ok(json_response(StatusCode::OK, &body)))
}

async fn new_nonce(State(acme): State<Acme>, method: Method, headers: HeaderMap) -> Response {
    let base = base_url(&acme.server, &headers).ok();
    // RFC 8555 §7.2: 200 to HEAD, 204 to GET.
    let status = if method == Method::HEAD {
        StatusCode::OK
    } else {
        StatusCode::NO_CONTENT
    };
    answer(&acme, base.as_deref(), Ok(status.into_response()))
}

/// A POST, checked: its JWS parsed, its nonce used, its URL the one it came to.
struct Post {
    base: String,
    jws: ParsedJws,
}

fn check_post(acme: &Acme, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Result<Post, Refusal> {
    let base = base_url(&acme.server, headers)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if !content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/jose+json"))
    {
        return Err(Problem::with_status(
            ProblemType::Malformed,
            "ACME requests are JWS bodies of type application/jose+json",
            415,
        )
        .into());
    }
    let jws = ParsedJws::parse(body).map_err(|error| error.problem())?;
    if !acme.server.use_nonce(&jws.protected().nonce) {
        return Err(Problem::new(
            ProblemType::BadNonce,
            "the nonce was not issued by this node, or was used already; retry with the \
             Replay-Nonce of this answer",
        )
        .into());
    }
    let path = uri
        .path_and_query()
        .map_or(uri.path(), |path| path.as_str());
    let url = format!("{base}{path}");
    jws.check_url(&url).map_err(|error| error.problem())?;
    Ok(Post { base, jws })
}

/// The number in a resource URL (an account's or an order's id).
fn resource_id(text: &str) -> Result<u64, Refusal> {
    text.parse::<u64>()
        .ok()
        .filter(|id| id.to_string() == text)
        .ok_or_else(|| Problem::not_found(format!("no resource {text}")).into())
}

/// An authorization's position in a resource URL.
fn resource_position(text: &str) -> Result<u32, Refusal> {
    text.parse::<u32>()
        .ok()
        .filter(|position| position.to_string() == text)
        .ok_or_else(|| Problem::not_found(format!("no authorization {text}")).into())
}

/// The account a `kid`-signed request names, its signature checked with the account's key.
async fn signed_by_account(acme: &Acme, post: &Post) -> Result<Account, Refusal> {
    let kid = post.jws.kid().map_err(|error| error.problem())?;
    let prefix = format!("{}/acme/account/", post.base);
    let id = kid
        .strip_prefix(&prefix)
        .and_then(|id| id.parse::<u64>().ok())
        // The account URL exactly (RFC 8555 §6.2), not another spelling of its number.
        .filter(|id| kid == format!("{prefix}{id}"))
        .ok_or_else(|| {
            Problem::new(
                ProblemType::AccountDoesNotExist,
                format!("{kid} is not an account URL of this server"),
            )
        })?;
    let account = read(acme, move |state, _| {
        state.acme().account(AccountId(id)).cloned()
    })
    .await?
    .ok_or_else(|| Problem::new(ProblemType::AccountDoesNotExist, format!("no account {id}")))?;
    let key = stored_key(&account)?;
    post.jws.verify(&key).map_err(|error| error.problem())?;
    if account.status != AccountStatus::Valid {
        return Err(deactivated(account.id));
    }
    Ok(account)
}

/// RFC 8555 §7.3.6: a deactivated account's requests are answered 401 `unauthorized`.
fn deactivated(id: AccountId) -> Refusal {
    Problem::with_status(
        ProblemType::Unauthorized,
        format!("account {id} is deactivated"),
        401,
    )
    .into()
}

/// The contacts an account may have: `mailto:` URLs of one address without header fields
/// (RFC 8555 §7.3).
fn check_contacts(contacts: &[String]) -> Result<(), Refusal> {
    for contact in contacts {
        let Some(address) = contact.strip_prefix("mailto:") else {
            return Err(Problem::new(
                ProblemType::UnsupportedContact,
                format!("{contact}: only mailto: contacts are supported"),
            )
            .into());
        };
        let one_address = !address.is_empty()
            && address.contains('@')
            && !address.contains(',')
            && !address.contains('?');
        if !one_address {
            return Err(Problem::new(
                ProblemType::InvalidContact,
                format!("{contact}: a mailto: contact names one address, without header fields"),
            )
            .into());
        }
    }
    Ok(())
}

fn stored_key(account: &Account) -> Result<Jwk, Refusal> {
    serde_json::from_str::<Value>(&account.key.jwk)
        .ok()
        .and_then(|value| Jwk::from_json(&value).ok())
        .ok_or_else(|| {
            Problem::new(
                ProblemType::ServerInternal,
                "the account's stored key does not parse",
            )
            .into()
        })
}

fn account_key(jwk: &Jwk) -> AccountKey {
    AccountKey {
        jwk: jwk.canonical_json(),
        thumbprint: jwk.thumbprint(),
    }
}

/// Whether a failed write or read may be tried again: the cluster had no leader, or lost it
/// while the call was in flight.
fn retryable(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::NoLeader(_) | ServiceError::OutcomeUnknown(_) | ServiceError::Timeout(_)
    )
}

/// A linearizable read of the state, tried again while the cluster elects a leader (for up to
/// [`ACME_CLUSTER_WAIT`]): ACME clients do not retry a 5xx, so the node rides out an election
/// for them.
async fn read<T>(acme: &Acme, query: impl Fn(&certus_core::State, u64) -> T) -> Result<T, Refusal> {
    let deadline = tokio::time::Instant::now() + ACME_CLUSTER_WAIT;
    loop {
        match acme
            .replica
            .read(|state, now_ms| query(state, now_ms))
            .await
        {
            Ok(value) => return Ok(value),
            Err(error) if retryable(&error) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Proposes one ACME command; the state machine's answer. Like [`read`], it is tried again while
/// the cluster elects a leader. A try whose outcome was unknown may have been applied: a later
/// try's refusal that only says so (the order is finalized already, the serial revoked, the key
/// is this account's) is answered as the success it was.
async fn propose(acme: &Acme, command: AcmeCommand) -> Result<AcmeReply, Refusal> {
    let deadline = tokio::time::Instant::now() + ACME_CLUSTER_WAIT;
    let mut unknown = false;
    loop {
        let written = acme
            .replica
            .write(vec![Command::Acme(command.clone())])
            .await;
        let mut responses = match written {
            Ok(responses) => responses,
            Err(error) if retryable(&error) && tokio::time::Instant::now() < deadline => {
                unknown |= matches!(error, ServiceError::OutcomeUnknown(_));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        let result = match responses.pop() {
            Some(CoreResponse::Acme(result)) => result,
            other => {
                return Err(Problem::new(
                    ProblemType::ServerInternal,
                    format!("unexpected answer from the state machine: {other:?}"),
                )
                .into());
            }
        };
        return match (result, &command) {
            (Ok(reply), _) => Ok(reply),
            (Err(error), command) if unknown => landed_before(acme, command, error).await,
            (
                Err(
                    error @ AcmeError::RateLimited {
                        retry_at_ms: Some(retry_at_ms),
                        ..
                    },
                ),
                _,
            ) => {
                // RFC 8555 §6.6: say when the limit lets a new request through.
                let wait_ms = retry_at_ms.saturating_sub(acme.replica.clock.now_ms());
                let Refusal(problem, _) = error.into();
                Err(Refusal(problem, Some(wait_ms.div_ceil(1000).max(1))))
            }
            (Err(error), _) => Err(error.into()),
        };
    }
}

/// After a try whose outcome was unknown, the refusal of the next one: the success of the
/// first when the refusal says only that it was applied, else the refusal.
async fn landed_before(
    acme: &Acme,
    command: &AcmeCommand,
    error: AcmeError,
) -> Result<AcmeReply, Refusal> {
    match (command, &error) {
        (
            AcmeCommand::Finalize { order, .. },
            AcmeError::NotReady {
                status: OrderStatus::Processing | OrderStatus::Valid,
                ..
            },
        )
        | (AcmeCommand::DeactivateAuthorization { order, .. }, AcmeError::Malformed(_)) => {
            let order = *order;
            match read(acme, move |state, _| state.acme().order(order).cloned()).await? {
                Some(order) => Ok(AcmeReply::Order(order)),
                None => Err(error.into()),
            }
        }
        (AcmeCommand::Revoke { .. }, AcmeError::AlreadyRevoked(_)) => Ok(AcmeReply::Revoked),
        (AcmeCommand::ChangeKey { account, .. }, AcmeError::KeyInUse(holder))
            if holder == account =>
        {
            let account = *account;
            match read(acme, move |state, _| state.acme().account(account).cloned()).await? {
                Some(account) => Ok(AcmeReply::Account {
                    account,
                    existing: true,
                }),
                None => Err(error.into()),
            }
        }
        _ => Err(error.into()),
    }
}

fn account_url(base: &str, id: AccountId) -> String {
    format!("{base}/acme/account/{id}")
}

fn order_url(base: &str, id: OrderId) -> String {
    format!("{base}/acme/order/{id}")
}

fn account_json(base: &str, account: &Account) -> Value {
    json!({
        "status": match account.status {
            AccountStatus::Valid => "valid",
            AccountStatus::Deactivated => "deactivated",
        },
        "contact": account.contact,
        "orders": format!("{}/orders", account_url(base, account.id)),
    })
}

fn order_status_name(status: OrderStatus) -> &'static str {
    match status {
        OrderStatus::Pending => "pending",
        OrderStatus::Ready => "ready",
        OrderStatus::Processing => "processing",
        OrderStatus::Valid => "valid",
        OrderStatus::Invalid => "invalid",
    }
}

fn order_json(base: &str, order: &Order, now_ms: u64) -> Value {
    let status = order.status(now_ms);
    let mut body = json!({
        "status": order_status_name(status),
        "expires": certus_acme::wire::rfc3339(order.expires_ms),
        "identifiers": order.authorizations.iter().map(|authz| json!({
            "type": "dns",
            "value": authz.identifier.as_str(),
        })).collect::<Vec<_>>(),
        "authorizations": (0..order.authorizations.len())
            .map(|position| format!("{base}/acme/authz/{}/{position}", order.id))
            .collect::<Vec<_>>(),
        "finalize": format!("{}/finalize", order_url(base, order.id)),
    });
    if order.certificate.is_some() {
        body["certificate"] = json!(format!("{base}/acme/certificate/{}", order.id));
    }
    if let Some(error) = &order.error {
        body["error"] = Problem::new(ProblemType::ServerInternal, error.as_str()).to_json();
    }
    if status == OrderStatus::Invalid
        && order.error.is_none()
        && let Some(authz) = order
            .authorizations
            .iter()
            .find(|authz| authz.error.is_some())
    {
        body["error"] = Problem::new(
            ProblemType::Unauthorized,
            format!(
                "the authorization for {} failed: {}",
                authz.identifier,
                authz.error.as_ref().map_or("", |error| error.as_str())
            ),
        )
        .to_json();
    }
    body
}

fn challenge_status_name(status: ChallengeStatus) -> &'static str {
    match status {
        ChallengeStatus::Pending => "pending",
        ChallengeStatus::Processing => "processing",
        ChallengeStatus::Valid => "valid",
        ChallengeStatus::Invalid => "invalid",
    }
}

fn challenge_json(base: &str, order: &Order, position: usize) -> Value {
    let authz = &order.authorizations[position];
    let mut body = json!({
        "type": "http-01",
        "url": format!("{base}/acme/challenge/{}/{position}", order.id),
        "status": challenge_status_name(authz.challenge),
        "token": authz.token.as_str(),
    });
    if let Some(validated_ms) = authz.validated_ms {
        body["validated"] = json!(certus_acme::wire::rfc3339(validated_ms));
    }
    if let Some(error) = &authz.error {
        body["error"] = Problem::new(ProblemType::Connection, error.as_str()).to_json();
    }
    body
}

fn authorization_json(base: &str, order: &Order, position: usize, now_ms: u64) -> Value {
    let authz = &order.authorizations[position];
    let status = match authz.status(order.expires_ms, now_ms) {
        AuthorizationStatus::Pending => "pending",
        AuthorizationStatus::Valid => "valid",
        AuthorizationStatus::Invalid => "invalid",
        AuthorizationStatus::Deactivated => "deactivated",
        AuthorizationStatus::Expired => "expired",
    };
    json!({
        "identifier": { "type": "dns", "value": authz.identifier.as_str() },
        "status": status,
        "expires": certus_acme::wire::rfc3339(order.expires_ms),
        "challenges": [challenge_json(base, order, position)],
    })
}

/// Runs a POST handler: checks the request, runs `handle`, and finishes the answer.
async fn serve_post<F, Fut>(
    acme: Acme,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    handle: F,
) -> Response
where
    F: FnOnce(Acme, Post) -> Fut,
    Fut: Future<Output = Answer>,
{
    let post = match check_post(&acme, &uri, &headers, &body) {
        Ok(post) => post,
        Err(refusal) => {
            let base = base_url(&acme.server, &headers).ok();
            return answer(&acme, base.as_deref(), Err(refusal));
        }
    };
    let base = post.base.clone();
    let result = handle(acme.clone(), post).await;
    answer(&acme, Some(&base), result)
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewAccountPayload {
    #[serde(default)]
    contact: Vec<String>,
    #[serde(default)]
    only_return_existing: bool,
    terms_of_service_agreed: Option<bool>,
}

async fn new_account(
    State(acme): State<Acme>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let jwk = match &post.jws.protected().key {
            KeyRef::Jwk(jwk) => jwk.clone(),
            KeyRef::Kid(_) => {
                return Err(Problem::new(
                    ProblemType::Malformed,
                    "a new account is signed with its key as jwk, not a kid",
                )
                .into());
            }
        };
        post.jws.verify(&jwk).map_err(|error| error.problem())?;
        let payload: NewAccountPayload =
            post.jws.payload_json().map_err(|error| error.problem())?;
        check_contacts(&payload.contact)?;
        let _ = payload.terms_of_service_agreed;
        let reply = propose(
            &acme,
            AcmeCommand::NewAccount {
                key: account_key(&jwk),
                contact: payload.contact,
                only_existing: payload.only_return_existing,
            },
        )
        .await?;
        let AcmeReply::Account { account, existing } = reply else {
            return Err(unexpected());
        };
        if account.status != AccountStatus::Valid {
            // Its key authorizes nothing any more, finding the account included.
            return Err(deactivated(account.id));
        }
        let status = if existing {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let response = json_response(status, &account_json(&post.base, &account));
        Ok(with_header(
            response,
            header::LOCATION,
            &account_url(&post.base, account.id),
        ))
    })
    .await
}

fn unexpected() -> Refusal {
    Problem::new(
        ProblemType::ServerInternal,
        "the state machine answered another kind of reply",
    )
    .into()
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccountPayload {
    contact: Option<Vec<String>>,
    status: Option<String>,
}

async fn account(
    State(acme): State<Acme>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let id = resource_id(&id)?;
        let account = signed_by_account(&acme, &post).await?;
        if account.id != AccountId(id) {
            return Err(Problem::new(
                ProblemType::Unauthorized,
                "the request is signed for another account",
            )
            .into());
        }
        let account = if post.jws.is_post_as_get() {
            account
        } else {
            let payload: AccountPayload =
                post.jws.payload_json().map_err(|error| error.problem())?;
            if let Some(contact) = &payload.contact {
                check_contacts(contact)?;
            }
            let deactivate = match payload.status.as_deref() {
                None => false,
                Some("deactivated") => true,
                Some(other) => {
                    return Err(Problem::new(
                        ProblemType::Malformed,
                        format!("an account's status can only be set to deactivated, not {other}"),
                    )
                    .into());
                }
            };
            if payload.contact.is_none() && !deactivate {
                account
            } else {
                let AcmeReply::Account { account, .. } = propose(
                    &acme,
                    AcmeCommand::UpdateAccount {
                        account: account.id,
                        contact: payload.contact,
                        deactivate,
                    },
                )
                .await?
                else {
                    return Err(unexpected());
                };
                account
            }
        };
        Ok(json_response(
            StatusCode::OK,
            &account_json(&post.base, &account),
        ))
    })
    .await
}

async fn account_orders(
    State(acme): State<Acme>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let after = uri_cursor(&uri);
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let id = resource_id(&id)?;
        let account = signed_by_account(&acme, &post).await?;
        if account.id != AccountId(id) {
            return Err(Problem::new(
                ProblemType::Unauthorized,
                "the request is signed for another account",
            )
            .into());
        }
        let base = post.base.clone();
        let (urls, more) = read(&acme, move |state, _| {
            let orders =
                state
                    .acme()
                    .orders_of(account.id, OrderId(after), ACME_ORDERS_PAGE_MAX + 1);
            let more = orders.len() > ACME_ORDERS_PAGE_MAX;
            let urls: Vec<(OrderId, String)> = orders
                .iter()
                .take(ACME_ORDERS_PAGE_MAX)
                .map(|order| (order.id, order_url(&base, order.id)))
                .collect();
            (urls, more)
        })
        .await?;
        let mut response = json_response(
            StatusCode::OK,
            &json!({ "orders": urls.iter().map(|(_, url)| url).collect::<Vec<_>>() }),
        );
        if more && let Some((last, _)) = urls.last() {
            let next = format!(
                "<{}/acme/account/{id}/orders?after={last}>;rel=\"next\"",
                post.base
            );
            if let Ok(value) = HeaderValue::from_str(&next) {
                response.headers_mut().append(header::LINK, value);
            }
        }
        Ok(response)
    })
    .await
}

/// The `after` query parameter of a paged list: the last order id of the previous page.
fn uri_cursor(uri: &Uri) -> u64 {
    uri.query()
        .and_then(|query| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix("after="))
                .and_then(|after| after.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Debug, Deserialize)]
struct IdentifierPayload {
    #[serde(rename = "type")]
    kind: String,
    value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewOrderPayload {
    identifiers: Vec<IdentifierPayload>,
    not_before: Option<String>,
    not_after: Option<String>,
}

async fn new_order(
    State(acme): State<Acme>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let account = signed_by_account(&acme, &post).await?;
        let payload: NewOrderPayload = post.jws.payload_json().map_err(|error| error.problem())?;
        if payload.not_before.is_some() || payload.not_after.is_some() {
            return Err(Problem::new(
                ProblemType::Malformed,
                "notBefore and notAfter are not supported: certificates are valid from issuance \
                 for the cluster CA's validity",
            )
            .into());
        }
        let mut names = Vec::new();
        for identifier in payload.identifiers {
            if identifier.kind != "dns" {
                return Err(Problem::new(
                    ProblemType::UnsupportedIdentifier,
                    format!(
                        "identifier type {} is not supported; only dns",
                        identifier.kind
                    ),
                )
                .into());
            }
            let name = DnsName::new(identifier.value.to_ascii_lowercase()).map_err(|error| {
                Problem::new(
                    ProblemType::RejectedIdentifier,
                    format!("{}: {error}", identifier.value),
                )
            })?;
            names.push(name);
        }
        names.sort();
        names.dedup();
        let tokens = names
            .iter()
            .map(|_| {
                let mut random = [0u8; 32];
                fill_random(&mut random);
                ChallengeToken::new(certus_acme::b64::encode(&random))
                    .expect("base64url of 32 bytes is a token")
            })
            .collect();
        let AcmeReply::Order(order) = propose(
            &acme,
            AcmeCommand::NewOrder {
                account: account.id,
                identifiers: names,
                tokens,
            },
        )
        .await?
        else {
            return Err(unexpected());
        };
        let now_ms = acme.replica.clock.now_ms();
        let response = json_response(StatusCode::CREATED, &order_json(&post.base, &order, now_ms));
        Ok(with_header(
            response,
            header::LOCATION,
            &order_url(&post.base, order.id),
        ))
    })
    .await
}

/// The account's order `id`, read linearizably, with the reader's clock.
async fn owned_order(acme: &Acme, account: AccountId, id: u64) -> Result<(Order, u64), Refusal> {
    let (order, now_ms) = read(acme, move |state, now_ms| {
        (
            state.acme().order(OrderId(id)).cloned(),
            now_ms.max(state.acme().clock_ms()),
        )
    })
    .await?;
    match order {
        Some(order) if order.account == account => Ok((order, now_ms)),
        _ => Err(Problem::not_found(format!("no order {id} for this account")).into()),
    }
}

fn order_answer(base: &str, order: &Order, now_ms: u64) -> Response {
    let response = json_response(StatusCode::OK, &order_json(base, order, now_ms));
    let response = with_header(response, header::LOCATION, &order_url(base, order.id));
    if order.status(now_ms) == OrderStatus::Processing {
        // RFC 8555 §7.4: a client polls a processing order; say when.
        with_header(response, header::RETRY_AFTER, "1")
    } else {
        response
    }
}

async fn order(
    State(acme): State<Acme>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let id = resource_id(&id)?;
        let account = signed_by_account(&acme, &post).await?;
        let (order, now_ms) = owned_order(&acme, account.id, id).await?;
        Ok(order_answer(&post.base, &order, now_ms))
    })
    .await
}

#[derive(Debug, Deserialize)]
struct FinalizePayload {
    csr: String,
}

async fn finalize(
    State(acme): State<Acme>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let id = resource_id(&id)?;
        let account = signed_by_account(&acme, &post).await?;
        let payload: FinalizePayload = post.jws.payload_json().map_err(|error| error.problem())?;
        let der = certus_acme::b64::decode(&payload.csr).map_err(|error| {
            Problem::new(
                ProblemType::BadCsr,
                format!("the CSR is not base64url: {error}"),
            )
        })?;
        let (order, now_ms) = owned_order(&acme, account.id, id).await?;
        let status = order.status(now_ms);
        if status != OrderStatus::Ready {
            return Err(Problem::new(
                ProblemType::OrderNotReady,
                format!("order {id} is {}, not ready", order_status_name(status)),
            )
            .into());
        }
        let csr = certus_ca::csr::CheckedCsr::from_der(&der)
            .map_err(|error| Problem::new(ProblemType::BadCsr, error.to_string()))?;
        let names: Vec<String> = order
            .names()
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect();
        csr.matches(&names)
            .map_err(|error| Problem::new(ProblemType::BadCsr, error.to_string()))?;
        let AcmeReply::Order(order) = propose(
            &acme,
            AcmeCommand::Finalize {
                account: account.id,
                order: OrderId(id),
                csr: der,
            },
        )
        .await?
        else {
            return Err(unexpected());
        };
        Ok(order_answer(
            &post.base,
            &order,
            acme.replica.clock.now_ms(),
        ))
    })
    .await
}

/// `(order, position)` of an authorization or challenge URL, within the order.
fn position_in(order: &Order, position: u32) -> Result<usize, Refusal> {
    let index = position as usize;
    if index < order.authorizations.len() {
        Ok(index)
    } else {
        Err(Problem::not_found(format!(
            "order {} has no authorization {position}",
            order.id
        ))
        .into())
    }
}

#[derive(Debug, Default, Deserialize)]
struct AuthorizationPayload {
    status: Option<String>,
}

async fn authorization(
    State(acme): State<Acme>,
    Path((id, position)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let (id, position) = (resource_id(&id)?, resource_position(&position)?);
        let account = signed_by_account(&acme, &post).await?;
        let (mut order, mut now_ms) = owned_order(&acme, account.id, id).await?;
        let index = position_in(&order, position)?;
        if !post.jws.is_post_as_get() {
            let payload: AuthorizationPayload =
                post.jws.payload_json().map_err(|error| error.problem())?;
            match payload.status.as_deref() {
                Some("deactivated") => {
                    let AcmeReply::Order(updated) = propose(
                        &acme,
                        AcmeCommand::DeactivateAuthorization {
                            account: account.id,
                            order: order.id,
                            authorization: position,
                        },
                    )
                    .await?
                    else {
                        return Err(unexpected());
                    };
                    order = updated;
                    now_ms = acme.replica.clock.now_ms();
                }
                None => {}
                Some(other) => {
                    return Err(Problem::new(
                        ProblemType::Malformed,
                        format!("an authorization can only be deactivated, not set to {other}"),
                    )
                    .into());
                }
            }
        }
        let response = json_response(
            StatusCode::OK,
            &authorization_json(&post.base, &order, index, now_ms),
        );
        Ok(
            if order.authorizations[index].challenge == ChallengeStatus::Processing {
                with_header(response, header::RETRY_AFTER, "1")
            } else {
                response
            },
        )
    })
    .await
}

async fn challenge(
    State(acme): State<Acme>,
    Path((id, position)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let (id, position) = (resource_id(&id)?, resource_position(&position)?);
        let account = signed_by_account(&acme, &post).await?;
        let (mut order, _) = owned_order(&acme, account.id, id).await?;
        let index = position_in(&order, position)?;
        // An empty payload fetches the challenge; `{}` says the client is ready (RFC 8555
        // §7.5.1).
        if !post.jws.is_post_as_get() {
            let _: serde_json::Map<String, Value> =
                post.jws.payload_json().map_err(|error| error.problem())?;
            let AcmeReply::Order(updated) = propose(
                &acme,
                AcmeCommand::RespondChallenge {
                    account: account.id,
                    order: order.id,
                    authorization: position,
                },
            )
            .await?
            else {
                return Err(unexpected());
            };
            order = updated;
        }
        let response = json_response(StatusCode::OK, &challenge_json(&post.base, &order, index));
        let up = format!("<{}/acme/authz/{id}/{position}>;rel=\"up\"", post.base);
        let mut response = response;
        if let Ok(value) = HeaderValue::from_str(&up) {
            response.headers_mut().append(header::LINK, value);
        }
        Ok(
            if order.authorizations[index].challenge == ChallengeStatus::Processing {
                with_header(response, header::RETRY_AFTER, "1")
            } else {
                response
            },
        )
    })
    .await
}

async fn certificate(
    State(acme): State<Acme>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let id = resource_id(&id)?;
        let account = signed_by_account(&acme, &post).await?;
        let (order, _) = owned_order(&acme, account.id, id).await?;
        let chain = order
            .certificate
            .ok_or_else(|| Problem::not_found(format!("order {id} has no certificate (yet)")))?;
        let mut response = (StatusCode::OK, chain).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/pem-certificate-chain"),
        );
        Ok(response)
    })
    .await
}

#[derive(Debug, Deserialize)]
struct RevokePayload {
    certificate: String,
    /// Read wide, so that any number out of RFC 5280's range is `badRevocationReason`.
    reason: Option<i64>,
}

async fn revoke_cert(
    State(acme): State<Acme>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        // Who signed it comes first: an account (`kid`) or, with `jwk`, the key of the
        // certificate itself (checked against the certificate below).
        let account = match &post.jws.protected().key {
            KeyRef::Kid(_) => Some(signed_by_account(&acme, &post).await?),
            KeyRef::Jwk(jwk) => {
                post.jws.verify(jwk).map_err(|error| error.problem())?;
                None
            }
        };
        let payload: RevokePayload = post.jws.payload_json().map_err(|error| error.problem())?;
        let reason = match payload.reason {
            None => 0,
            Some(code) => u8::try_from(code)
                .ok()
                .filter(|code| certus_ca::crl::is_revocation_reason(*code))
                .ok_or_else(|| {
                    Problem::new(
                        ProblemType::BadRevocationReason,
                        format!("{code} is not an RFC 5280 reason code (0 to 10, not 7)"),
                    )
                })?,
        };
        let der = certus_acme::b64::decode(&payload.certificate).map_err(|error| {
            Problem::new(
                ProblemType::Malformed,
                format!("the certificate is not base64url: {error}"),
            )
        })?;
        let leaf = certus_ca::certificate::leaf_info(&der)
            .map_err(|error| Problem::new(ProblemType::Malformed, error.to_string()))?;
        // Only a certificate this cluster issued can be revoked here: one an order holds, byte
        // for byte (a copy of its serial in a certificate of someone else's making is not it).
        let owner = read(&acme, {
            let der = der.clone();
            move |state, _| issued_by_order(state, &der)
        })
        .await?
        .ok_or_else(|| {
            Problem::not_found("this server issued no such certificate (or its order was deleted)")
        })?;
        match (&post.jws.protected().key, account) {
            (KeyRef::Kid(_), Some(account)) if account.id != owner => {
                // RFC 8555 §7.6: the account that ordered it, or one holding valid
                // authorizations for all its names; authorizations are per order here, so it
                // is the account that ordered it.
                return Err(Problem::new(
                    ProblemType::Unauthorized,
                    "this account did not order that certificate",
                )
                .into());
            }
            (KeyRef::Jwk(jwk), _) => {
                let certificate_key =
                    Jwk::from_spki_der(&leaf.spki_der).map_err(|error| error.problem())?;
                if !certificate_key.same_key(jwk) {
                    return Err(Problem::new(
                        ProblemType::Unauthorized,
                        "the request is signed neither by an account nor with the certificate's \
                         key",
                    )
                    .into());
                }
            }
            _ => {}
        }
        propose(
            &acme,
            AcmeCommand::Revoke {
                serial: leaf.serial_hex.clone(),
                reason,
            },
        )
        .await?;
        Ok(StatusCode::OK.into_response())
    })
    .await
}

/// The account of the order whose certificate (the first of its chain) is exactly `der`.
fn issued_by_order(state: &certus_core::State, der: &[u8]) -> Option<AccountId> {
    let acme = state.acme();
    let mut after = OrderId(0);
    loop {
        let page = acme.orders(after, 256);
        let last = page.last()?.id;
        let found = page.iter().find(|order| {
            order.certificate.as_deref().is_some_and(|chain| {
                certus_ca::certificate::first_pem_certificate(chain).is_ok_and(|first| first == der)
            })
        });
        if let Some(order) = found {
            return Some(order.account);
        }
        after = last;
    }
}

async fn key_change(
    State(acme): State<Acme>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve_post(acme, uri, headers, body, |acme, post| async move {
        let account = signed_by_account(&acme, &post).await?;
        let key = stored_key(&account)?;
        let rollover = certus_acme::jws::verify_key_change(&post.jws, &key)
            .map_err(|error| error.problem())?;
        let reply = propose(
            &acme,
            AcmeCommand::ChangeKey {
                account: account.id,
                old_thumbprint: account.key.thumbprint.clone(),
                new_key: account_key(&rollover.new_key),
            },
        )
        .await;
        match reply {
            Ok(AcmeReply::Account { account, .. }) => Ok(json_response(
                StatusCode::OK,
                &account_json(&post.base, &account),
            )),
            Ok(_) => Err(unexpected()),
            Err(Refusal(problem, _)) if problem.status == 409 => {
                // RFC 8555 §7.3.5: 409, with the account that has the key.
                let holder = read(&acme, {
                    let thumbprint = rollover.new_key.thumbprint();
                    move |state, _| {
                        state
                            .acme()
                            .account_by_thumbprint(&thumbprint)
                            .map(|account| account.id)
                    }
                })
                .await?;
                let response = problem_response(&problem);
                Ok(match holder {
                    Some(holder) => {
                        with_header(response, header::LOCATION, &account_url(&post.base, holder))
                    }
                    None => response,
                })
            }
            Err(refusal) => Err(refusal),
        }
    })
    .await
}

async fn crl(State(acme): State<Acme>, headers: HeaderMap) -> Response {
    let base = base_url(&acme.server, &headers).ok();
    let result: Answer = async {
        let ca = acme.server.ca().cloned().ok_or_else(|| {
            Problem::not_found(
                "this cluster issues through an upstream CA, which keeps its own CRL",
            )
        })?;
        let (entries, number, now_ms) = read(&acme, |state, now_ms| {
            let acme = state.acme();
            let entries: Vec<certus_ca::crl::RevokedEntry> = acme
                .revocations()
                .filter_map(|revocation| {
                    Some(certus_ca::crl::RevokedEntry {
                        serial: hex_bytes(&revocation.serial)?,
                        revoked_ms: revocation.revoked_ms,
                        reason: revocation.reason,
                    })
                })
                .collect();
            // The CRL number rises with every revocation: the latest one's time.
            let number = acme
                .revocations()
                .map(|revocation| revocation.revoked_ms)
                .max()
                .unwrap_or(0);
            (entries, number, now_ms)
        })
        .await?;
        let day_ms = 24 * 60 * 60 * 1000;
        let der = ca
            .crl(&entries, number, now_ms, now_ms + day_ms)
            .map_err(|error| Problem::new(ProblemType::ServerInternal, error.to_string()))?;
        let mut response = (StatusCode::OK, der).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/pkix-crl"),
        );
        Ok(response)
    }
    .await;
    answer(&acme, base.as_deref(), result)
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(hex.get(at..at + 2)?, 16).ok())
        .collect()
}
