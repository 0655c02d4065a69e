//! Errors of the apiserver as an operator reads them. kube's own `Display` of an API error
//! appends the Rust `Debug` form of the whole status (`ApiError: … (Status { … })`), which no
//! log line or status message of kanon's should carry.

/// `error` in words: for an answer of the apiserver, its code, reason and message
/// (`404 NotFound: namespaces "kanon" not found`; a body that was no `Status`, such as the
/// `404 page not found` of a path nothing serves, as the body says); otherwise kube's own text.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let message = status.message.trim();
            // kube's reason for a body it could not read as a Status: not the apiserver's.
            let reason = match status.reason.as_str() {
                "Failed to parse error data" => "",
                reason => reason.trim(),
            };
            let code = status.code;
            match (reason.is_empty(), message.is_empty()) {
                (true, true) => format!("the apiserver answered {code}"),
                (true, false) if message.starts_with(&code.to_string()) => message.to_owned(),
                (true, false) => format!("{code}: {message}"),
                (false, true) => format!("{code} {reason}"),
                (false, false) => format!("{code} {reason}: {message}"),
            }
        }
        other => other.to_string(),
    }
}

/// A watch's failure in words, its apiserver error described as [`describe`] does.
pub fn describe_watch(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match error {
        Error::InitialListFailed(error) => format!("the initial list failed: {}", describe(error)),
        Error::WatchStartFailed(error) => format!("the watch could not start: {}", describe(error)),
        Error::WatchError(status) => format!(
            "the apiserver ended the watch: {}",
            describe(&kube::Error::Api(status.clone()))
        ),
        Error::WatchFailed(error) => format!("the watch failed: {}", describe(error)),
        other => other.to_string(),
    }
}

/// Whether `error` is the apiserver's 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn an_api_error_is_its_code_reason_and_message_never_a_debug_dump() {
        let status = Status::failure("namespaces \"kanon\" not found", "NotFound").with_code(404);
        let error = kube::Error::Api(status.boxed());
        assert!(
            error.to_string().contains("Status {"),
            "kube's own text dumps it"
        );
        assert_eq!(
            describe(&error),
            "404 NotFound: namespaces \"kanon\" not found"
        );
        assert!(is_not_found(&error));
        // A plain-text body, as a path no CRD serves answers.
        let status =
            Status::failure("404 page not found", "Failed to parse error data").with_code(404);
        assert_eq!(
            describe(&kube::Error::Api(status.boxed())),
            "404 page not found"
        );
        let status = Status::failure("", "").with_code(503);
        assert_eq!(
            describe(&kube::Error::Api(status.boxed())),
            "the apiserver answered 503"
        );
    }
}
