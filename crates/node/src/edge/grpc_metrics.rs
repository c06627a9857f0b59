//! gRPC requests counted by method and status code, and timed, for `/metrics`.
//!
//! A tower layer in front of every gRPC service. gRPC puts a call's status in the response
//! headers when it fails before any message (a "trailers-only" response) and in the trailers
//! otherwise, so the layer wraps the response body and records the call once, when the status
//! has been seen — or, if the body is dropped first (the client went away, the server stopped),
//! as `CANCELLED`. The duration runs from the request's arrival to the end of the response, so a
//! long-poll or a stream counts its whole life.
//!
//! The `method` label is `/package.Service/Method` for the methods the node's descriptors name
//! ([`certus_proto::FILE_DESCRIPTOR_SET`]) and `other` for any other path: a client cannot grow
//! the label set.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use prost::Message as _;

use crate::metrics::Metrics;

/// The `method` label of a request for a path no known method has.
pub const OTHER_METHOD: &str = "other";

/// The gRPC methods the node's descriptors define, as request paths (`/certus.v1.Leases/Acquire`).
#[derive(Debug, Clone, Default)]
pub struct KnownMethods(Arc<BTreeSet<String>>);

impl KnownMethods {
    /// Every method of every service in `descriptor_set` (a serialized `FileDescriptorSet`), plus
    /// the reflection services the node serves.
    pub fn from_descriptors(descriptor_set: &[u8]) -> Result<KnownMethods, prost::DecodeError> {
        let set = prost_types::FileDescriptorSet::decode(descriptor_set)?;
        let mut paths = BTreeSet::new();
        for file in &set.file {
            let package = file.package();
            for service in &file.service {
                for method in &service.method {
                    let service = if package.is_empty() {
                        service.name().to_owned()
                    } else {
                        format!("{package}.{}", service.name())
                    };
                    paths.insert(format!("/{service}/{}", method.name()));
                }
            }
        }
        for reflection in ["grpc.reflection.v1", "grpc.reflection.v1alpha"] {
            paths.insert(format!(
                "/{reflection}.ServerReflection/ServerReflectionInfo"
            ));
        }
        Ok(KnownMethods(Arc::new(paths)))
    }

    /// Every known method's path.
    pub fn paths(&self) -> &BTreeSet<String> {
        &self.0
    }

    /// The `method` label of a request for `path`.
    pub fn label(&self, path: &str) -> String {
        if self.0.contains(path) {
            path.to_owned()
        } else {
            OTHER_METHOD.to_owned()
        }
    }

    /// How many methods are known.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no method is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Counts and times every gRPC call of the services it wraps.
#[derive(Debug, Clone)]
pub struct GrpcMetricsLayer {
    metrics: Arc<Metrics>,
    methods: KnownMethods,
}

impl GrpcMetricsLayer {
    /// A layer recording into `metrics`, labelling by `methods`.
    pub fn new(metrics: Arc<Metrics>, methods: KnownMethods) -> GrpcMetricsLayer {
        GrpcMetricsLayer { metrics, methods }
    }
}

impl<S> tower_layer::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetricsService<S>;

    fn layer(&self, inner: S) -> GrpcMetricsService<S> {
        GrpcMetricsService {
            inner,
            metrics: Arc::clone(&self.metrics),
            methods: self.methods.clone(),
        }
    }
}

/// The service [`GrpcMetricsLayer`] makes.
#[derive(Debug, Clone)]
pub struct GrpcMetricsService<S> {
    inner: S,
    metrics: Arc<Metrics>,
    methods: KnownMethods,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, RequestBody, ResponseBody> tower_service::Service<http::Request<RequestBody>>
    for GrpcMetricsService<S>
where
    S: tower_service::Service<http::Request<RequestBody>, Response = http::Response<ResponseBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = http::Response<CountedBody<ResponseBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
        let call = Call {
            method: self.methods.label(request.uri().path()),
            started: Instant::now(),
            metrics: Arc::clone(&self.metrics),
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let code = grpc_status(response.headers());
            let (parts, body) = response.into_parts();
            let mut body = CountedBody {
                inner: body,
                call: Some(call),
            };
            // A trailers-only response (an error before any message) ends here.
            if let Some(code) = code {
                body.record(code);
            }
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

/// One call, until its status is known.
#[derive(Debug)]
struct Call {
    method: String,
    started: Instant,
    metrics: Arc<Metrics>,
}

/// A response body that records its call when the status goes by, or when it is dropped.
#[derive(Debug)]
pub struct CountedBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> CountedBody<B> {
    fn record(&mut self, code: i32) {
        if let Some(call) = self.call.take() {
            call.metrics
                .count_grpc_request(&call.method, code, call.started.elapsed());
        }
    }
}

impl<B> Drop for CountedBody<B> {
    fn drop(&mut self) {
        // No status went by: the call was cut off before it ended.
        self.record(CANCELLED);
    }
}

/// gRPC's `CANCELLED`.
const CANCELLED: i32 = 1;

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(code) = frame.trailers_ref().and_then(grpc_status)
        {
            self.record(code);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The `grpc-status` in `headers`, if there is a valid one.
fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_certus_method_is_known_and_anything_else_is_other() {
        let methods = KnownMethods::from_descriptors(certus_proto::FILE_DESCRIPTOR_SET)
            .expect("the compiled descriptors decode");
        for path in [
            "/certus.v1.Leases/Acquire",
            "/certus.v1.Pipelines/Enqueue",
            "/certus.v1.Sessions/Create",
            "/certus.v1.Admin/Status",
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            assert_eq!(methods.label(path), path, "{path} is known");
        }
        for path in [
            "/certus.v1.Leases/Nope",
            "/",
            "/certus.v1.Leases/Acquire/x",
            "/evil.Service/Method",
        ] {
            assert_eq!(methods.label(path), OTHER_METHOD, "{path} is not");
        }
        assert!(methods.len() > 50, "{} methods", methods.len());
    }

    #[test]
    fn statuses_are_read_from_headers_or_trailers_only_when_valid() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(grpc_status(&headers), None);
        headers.insert("grpc-status", http::HeaderValue::from_static("5"));
        assert_eq!(grpc_status(&headers), Some(5));
        headers.insert("grpc-status", http::HeaderValue::from_static("five"));
        assert_eq!(grpc_status(&headers), None);
    }
}
