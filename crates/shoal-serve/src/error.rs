//! The gateway's errors as HTTP answers: each a status and a JSON body
//! `{"error": "…"}` whose message is one sentence a person can act on.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// An error answered to a client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request itself is malformed (400).
    #[error("{0}")]
    BadRequest(String),
    /// The request lacks the gateway's token (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The gateway's policy refuses it (403): a backend or a path the
    /// operator did not allow.
    #[error("{0}")]
    Forbidden(String),
    /// The body is not of the type the route takes (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// No such function (404).
    #[error("{0}")]
    NotFound(String),
    /// The request contradicts itself or the state (409).
    #[error("{0}")]
    Conflict(String),
    /// Well-formed but unusable settings (422).
    #[error("{0}")]
    Unprocessable(String),
    /// An upload is larger than the gateway accepts (413).
    #[error("{0}")]
    TooLarge(String),
    /// The function's queue is full (429, Retry-After).
    #[error("function {0} is at its limit of instances and its queue is full: retry later")]
    QueueFull(String),
    /// No instance became free in time, or the gateway is stopping (503, Retry-After).
    #[error("{0}")]
    Unavailable(String),
    /// The instance failed to answer (502).
    #[error("{0}")]
    BadGateway(String),
    /// The instance did not answer within the function's timeout (504).
    #[error("{0}")]
    Timeout(String),
    /// The gateway itself failed (500).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::QueueFull(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::json!({ "error": self.to_string() }).to_string();
        let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        if matches!(self, ApiError::QueueFull(_) | ApiError::Unavailable(_)) {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}
