//! Durations and timestamps: conversions, arithmetic and the calendar getters, with cel-go's
//! standard overload ids and signatures (`common/stdlib/standard.go` of cel-go v0.26).
//! Comparisons and equality are the interpreter's.

use crate::env::Env;
use crate::error::EvalError;
use crate::function::Ctx;
use crate::time::{Civil, Duration, Timestamp, conversion_error};
use crate::value::Value;

/// What an overload does with its arguments (the receiver first); none of these needs the
/// evaluation context.
#[cfg(test)]
type Pure = for<'a> fn(&[Value<'a>]) -> Result<Value<'a>, EvalError>;

/// Declares each overload once: `install` registers it (wrapped to take the context), and tests
/// find its behaviour by id.
macro_rules! overloads {
    ($($kind:ident $id:literal $signature:literal => $pure:path;)*) => {
        pub(crate) fn install(env: &mut Env) {
            $({
                fn implementation<'a>(_: &mut Ctx<'_, '_>, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
                    $pure(args)
                }
                env.$kind($id, $signature, implementation);
            })*
        }

        #[cfg(test)]
        fn pure(id: &str) -> Option<Pure> {
            match id {
                $($id => Some($pure),)*
                _ => None,
            }
        }
    };
}

overloads! {
    // Conversions.
    function "duration_to_duration" "duration(duration) -> duration" => duration_identity;
    function "int64_to_duration" "duration(int) -> duration" => int_to_duration;
    function "string_to_duration" "duration(string) -> duration" => string_to_duration;
    function "timestamp_to_timestamp" "timestamp(timestamp) -> timestamp" => timestamp_identity;
    function "int64_to_timestamp" "timestamp(int) -> timestamp" => int_to_timestamp;
    function "string_to_timestamp" "timestamp(string) -> timestamp" => string_to_timestamp;
    function "duration_to_int64" "int(duration) -> int" => duration_to_int;
    function "timestamp_to_int64" "int(timestamp) -> int" => timestamp_to_int;
    function "duration_to_string" "string(duration) -> string" => duration_to_string;
    function "timestamp_to_string" "string(timestamp) -> string" => timestamp_to_string;

    // Arithmetic.
    function "add_timestamp_duration" "_+_(timestamp, duration) -> timestamp" => add_timestamp_duration;
    function "add_duration_timestamp" "_+_(duration, timestamp) -> timestamp" => add_duration_timestamp;
    function "add_duration_duration" "_+_(duration, duration) -> duration" => add_duration_duration;
    function "subtract_timestamp_timestamp" "_-_(timestamp, timestamp) -> duration" => subtract_timestamp_timestamp;
    function "subtract_timestamp_duration" "_-_(timestamp, duration) -> timestamp" => subtract_timestamp_duration;
    function "subtract_duration_duration" "_-_(duration, duration) -> duration" => subtract_duration_duration;

    // Timestamp getters, in UTC or in the zone given.
    method "timestamp_to_year" "timestamp.getFullYear() -> int" => full_year;
    method "timestamp_to_year_with_tz" "timestamp.getFullYear(string) -> int" => full_year;
    method "timestamp_to_month" "timestamp.getMonth() -> int" => month;
    method "timestamp_to_month_with_tz" "timestamp.getMonth(string) -> int" => month;
    method "timestamp_to_day_of_year" "timestamp.getDayOfYear() -> int" => day_of_year;
    method "timestamp_to_day_of_year_with_tz" "timestamp.getDayOfYear(string) -> int" => day_of_year;
    method "timestamp_to_day_of_month" "timestamp.getDayOfMonth() -> int" => day_of_month;
    method "timestamp_to_day_of_month_with_tz" "timestamp.getDayOfMonth(string) -> int" => day_of_month;
    method "timestamp_to_day_of_month_1_based" "timestamp.getDate() -> int" => date;
    method "timestamp_to_day_of_month_1_based_with_tz" "timestamp.getDate(string) -> int" => date;
    method "timestamp_to_day_of_week" "timestamp.getDayOfWeek() -> int" => day_of_week;
    method "timestamp_to_day_of_week_with_tz" "timestamp.getDayOfWeek(string) -> int" => day_of_week;
    method "timestamp_to_hours" "timestamp.getHours() -> int" => timestamp_hours;
    method "timestamp_to_hours_with_tz" "timestamp.getHours(string) -> int" => timestamp_hours;
    method "timestamp_to_minutes" "timestamp.getMinutes() -> int" => timestamp_minutes;
    method "timestamp_to_minutes_with_tz" "timestamp.getMinutes(string) -> int" => timestamp_minutes;
    method "timestamp_to_seconds" "timestamp.getSeconds() -> int" => timestamp_seconds;
    // cel-go's id really is `_tz` here, not `_with_tz`.
    method "timestamp_to_seconds_tz" "timestamp.getSeconds(string) -> int" => timestamp_seconds;
    method "timestamp_to_milliseconds" "timestamp.getMilliseconds() -> int" => timestamp_milliseconds;
    method "timestamp_to_milliseconds_with_tz" "timestamp.getMilliseconds(string) -> int" => timestamp_milliseconds;

    // Duration getters: the whole duration in a unit, not a field of it.
    method "duration_to_hours" "duration.getHours() -> int" => duration_hours;
    method "duration_to_minutes" "duration.getMinutes() -> int" => duration_minutes;
    method "duration_to_seconds" "duration.getSeconds() -> int" => duration_seconds;
    method "duration_to_milliseconds" "duration.getMilliseconds() -> int" => duration_milliseconds;
}

/// The error for arguments of types an overload does not take; the interpreter dispatches on
/// types, so this only guards against a wrong call.
fn mismatch(function: &str, args: &[Value<'_>]) -> EvalError {
    crate::function::dispatch_failure(function, args)
}

fn duration_at(function: &str, args: &[Value<'_>], index: usize) -> Result<Duration, EvalError> {
    match args.get(index) {
        Some(Value::Duration(duration)) => Ok(*duration),
        _ => Err(mismatch(function, args)),
    }
}

fn timestamp_at(function: &str, args: &[Value<'_>], index: usize) -> Result<Timestamp, EvalError> {
    match args.get(index) {
        Some(Value::Timestamp(timestamp)) => Ok(*timestamp),
        _ => Err(mismatch(function, args)),
    }
}

fn string_at<'v>(
    function: &str,
    args: &'v [Value<'_>],
    index: usize,
) -> Result<&'v str, EvalError> {
    match args.get(index) {
        Some(Value::String(text)) => Ok(text.as_str()),
        _ => Err(mismatch(function, args)),
    }
}

fn int_at(function: &str, args: &[Value<'_>], index: usize) -> Result<i64, EvalError> {
    match args.get(index) {
        Some(Value::Int(value)) => Ok(*value),
        _ => Err(mismatch(function, args)),
    }
}

fn duration_identity<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Duration(duration_at("duration", args, 0)?))
}

/// Declared by cel-go v0.26, but its implementation converts an int to a duration, which cel-go's
/// ints refuse: `duration(1)` checks and then fails with this error.
fn int_to_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    int_at("duration", args, 0)?;
    Err(conversion_error("int", "google.protobuf.Duration"))
}

fn string_to_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Duration(Duration::parse(string_at(
        "duration", args, 0,
    )?)?))
}

fn timestamp_identity<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Timestamp(timestamp_at("timestamp", args, 0)?))
}

fn int_to_timestamp<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Timestamp(Timestamp::from_unix_seconds(int_at(
        "timestamp",
        args,
        0,
    )?)?))
}

fn string_to_timestamp<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Timestamp(Timestamp::parse(string_at(
        "timestamp",
        args,
        0,
    )?)?))
}

/// `int(duration)`: nanoseconds.
fn duration_to_int<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(duration_at("int", args, 0)?.nanos))
}

/// `int(timestamp)`: Unix seconds.
fn timestamp_to_int<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(timestamp_at("int", args, 0)?.unix_seconds()))
}

fn duration_to_string<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(duration_at("string", args, 0)?.to_string()))
}

fn timestamp_to_string<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(timestamp_at("string", args, 0)?.to_string()))
}

fn add_timestamp_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let timestamp = timestamp_at("_+_", args, 0)?;
    let duration = duration_at("_+_", args, 1)?;
    Ok(Value::Timestamp(timestamp.checked_add(duration)?))
}

fn add_duration_timestamp<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let duration = duration_at("_+_", args, 0)?;
    let timestamp = timestamp_at("_+_", args, 1)?;
    Ok(Value::Timestamp(timestamp.checked_add(duration)?))
}

fn add_duration_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let left = duration_at("_+_", args, 0)?;
    let right = duration_at("_+_", args, 1)?;
    Ok(Value::Duration(left.checked_add(right)?))
}

fn subtract_timestamp_timestamp<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let left = timestamp_at("_-_", args, 0)?;
    let right = timestamp_at("_-_", args, 1)?;
    Ok(Value::Duration(left.since(right)?))
}

fn subtract_timestamp_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let timestamp = timestamp_at("_-_", args, 0)?;
    let duration = duration_at("_-_", args, 1)?;
    Ok(Value::Timestamp(timestamp.checked_sub(duration)?))
}

fn subtract_duration_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let left = duration_at("_-_", args, 0)?;
    let right = duration_at("_-_", args, 1)?;
    Ok(Value::Duration(left.checked_sub(right)?))
}

/// The receiver's calendar fields: in UTC, or in the zone of the optional second argument.
fn civil(function: &str, args: &[Value<'_>]) -> Result<Civil, EvalError> {
    let timestamp = timestamp_at(function, args, 0)?;
    match args.len() {
        1 => Ok(timestamp.civil_utc()),
        2 => timestamp.civil_in(string_at(function, args, 1)?),
        _ => Err(mismatch(function, args)),
    }
}

fn full_year<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(civil("getFullYear", args)?.year))
}

/// 0-based: January is 0.
fn month<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getMonth", args)?.month) - 1))
}

/// 0-based: January 1st is 0.
fn day_of_year<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(
        i64::from(civil("getDayOfYear", args)?.day_of_year) - 1,
    ))
}

/// 0-based: the 1st is 0.
fn day_of_month<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getDayOfMonth", args)?.day) - 1))
}

/// 1-based: the 1st is 1.
fn date<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getDate", args)?.day)))
}

/// 0 is Sunday.
fn day_of_week<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getDayOfWeek", args)?.weekday)))
}

fn timestamp_hours<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getHours", args)?.hour)))
}

fn timestamp_minutes<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getMinutes", args)?.minute)))
}

fn timestamp_seconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(civil("getSeconds", args)?.second)))
}

/// The millisecond part of the second.
fn timestamp_milliseconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(
        civil("getMilliseconds", args)?.nanos / 1_000_000,
    )))
}

fn duration_hours<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(duration_at("getHours", args, 0)?.hours()))
}

fn duration_minutes<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(duration_at("getMinutes", args, 0)?.minutes()))
}

fn duration_seconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(duration_at("getSeconds", args, 0)?.seconds()))
}

fn duration_milliseconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(
        duration_at("getMilliseconds", args, 0)?.milliseconds(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Type;

    fn env() -> Env {
        let mut env = Env::empty();
        install(&mut env);
        env
    }

    /// Calls the overload `id` of `function` as the interpreter would (its behaviour is the
    /// same whatever the context, which none of these overloads reads).
    fn call<'a>(
        env: &Env,
        function: &str,
        id: &str,
        args: &[Value<'a>],
    ) -> Result<Value<'a>, EvalError> {
        assert!(
            env.overloads(function)
                .iter()
                .any(|overload| &*overload.id == id),
            "no overload {id} of {function}"
        );
        let pure = pure(id).unwrap_or_else(|| panic!("no behaviour for {id}"));
        pure(args)
    }

    fn string(text: &str) -> Value<'static> {
        Value::string(text)
    }

    fn timestamp(text: &str) -> Value<'static> {
        Value::Timestamp(Timestamp::parse(text).unwrap_or_else(|error| panic!("{text}: {error}")))
    }

    fn duration(text: &str) -> Value<'static> {
        Value::Duration(Duration::parse(text).unwrap_or_else(|error| panic!("{text}: {error}")))
    }

    fn int(result: Result<Value<'_>, EvalError>) -> i64 {
        match result {
            Ok(Value::Int(value)) => value,
            other => panic!("not an int: {other:?}"),
        }
    }

    fn text(result: Result<Value<'_>, EvalError>) -> String {
        match result {
            Ok(Value::String(text)) => text.as_str().to_owned(),
            other => panic!("not a string: {other:?}"),
        }
    }

    fn equals(result: Result<Value<'_>, EvalError>, expected: &Value<'_>) -> bool {
        result.is_ok_and(|value| value.equals(expected))
    }

    #[test]
    fn overloads_carry_cel_go_ids_and_signatures() {
        use Type::{Duration as D, Int as I, String as S, Timestamp as T};
        let env = env();
        let expected: &[(&str, &str, bool, &[Type], Type)] = &[
            ("duration", "duration_to_duration", false, &[D], D),
            ("duration", "int64_to_duration", false, &[I], D),
            ("duration", "string_to_duration", false, &[S], D),
            ("timestamp", "timestamp_to_timestamp", false, &[T], T),
            ("timestamp", "int64_to_timestamp", false, &[I], T),
            ("timestamp", "string_to_timestamp", false, &[S], T),
            ("int", "duration_to_int64", false, &[D], I),
            ("int", "timestamp_to_int64", false, &[T], I),
            ("string", "duration_to_string", false, &[D], S),
            ("string", "timestamp_to_string", false, &[T], S),
            ("_+_", "add_timestamp_duration", false, &[T, D], T),
            ("_+_", "add_duration_timestamp", false, &[D, T], T),
            ("_+_", "add_duration_duration", false, &[D, D], D),
            ("_-_", "subtract_timestamp_timestamp", false, &[T, T], D),
            ("_-_", "subtract_timestamp_duration", false, &[T, D], T),
            ("_-_", "subtract_duration_duration", false, &[D, D], D),
            ("getFullYear", "timestamp_to_year", true, &[T], I),
            ("getFullYear", "timestamp_to_year_with_tz", true, &[T, S], I),
            ("getMonth", "timestamp_to_month", true, &[T], I),
            ("getMonth", "timestamp_to_month_with_tz", true, &[T, S], I),
            ("getDayOfYear", "timestamp_to_day_of_year", true, &[T], I),
            (
                "getDayOfYear",
                "timestamp_to_day_of_year_with_tz",
                true,
                &[T, S],
                I,
            ),
            ("getDayOfMonth", "timestamp_to_day_of_month", true, &[T], I),
            (
                "getDayOfMonth",
                "timestamp_to_day_of_month_with_tz",
                true,
                &[T, S],
                I,
            ),
            (
                "getDate",
                "timestamp_to_day_of_month_1_based",
                true,
                &[T],
                I,
            ),
            (
                "getDate",
                "timestamp_to_day_of_month_1_based_with_tz",
                true,
                &[T, S],
                I,
            ),
            ("getDayOfWeek", "timestamp_to_day_of_week", true, &[T], I),
            (
                "getDayOfWeek",
                "timestamp_to_day_of_week_with_tz",
                true,
                &[T, S],
                I,
            ),
            ("getHours", "timestamp_to_hours", true, &[T], I),
            ("getHours", "timestamp_to_hours_with_tz", true, &[T, S], I),
            ("getHours", "duration_to_hours", true, &[D], I),
            ("getMinutes", "timestamp_to_minutes", true, &[T], I),
            (
                "getMinutes",
                "timestamp_to_minutes_with_tz",
                true,
                &[T, S],
                I,
            ),
            ("getMinutes", "duration_to_minutes", true, &[D], I),
            ("getSeconds", "timestamp_to_seconds", true, &[T], I),
            ("getSeconds", "timestamp_to_seconds_tz", true, &[T, S], I),
            ("getSeconds", "duration_to_seconds", true, &[D], I),
            (
                "getMilliseconds",
                "timestamp_to_milliseconds",
                true,
                &[T],
                I,
            ),
            (
                "getMilliseconds",
                "timestamp_to_milliseconds_with_tz",
                true,
                &[T, S],
                I,
            ),
            ("getMilliseconds", "duration_to_milliseconds", true, &[D], I),
        ];
        let mut count = 0;
        for (function, id, receiver, params, result) in expected {
            let overload = env
                .overloads(function)
                .iter()
                .find(|overload| &*overload.id == *id)
                .unwrap_or_else(|| panic!("no overload {id} of {function}"));
            assert_eq!(overload.signature.receiver, *receiver, "{id}");
            assert_eq!(overload.signature.params, *params, "{id}");
            assert_eq!(overload.signature.result, *result, "{id}");
            count += 1;
        }
        let installed: usize = env.functions.values().map(Vec::len).sum();
        assert_eq!(installed, count, "every overload installed is listed here");
    }

    #[test]
    fn conversions() {
        let env = env();
        // cel-spec's timestamps and conversions files.
        assert_eq!(
            int(call(
                &env,
                "int",
                "timestamp_to_int64",
                &[timestamp("2009-02-13T23:31:30Z")]
            )),
            1_234_567_890
        );
        assert_eq!(
            int(call(
                &env,
                "int",
                "timestamp_to_int64",
                &[timestamp("2004-09-16T23:59:59Z")]
            )),
            1_095_379_199
        );
        assert_eq!(
            text(call(
                &env,
                "string",
                "timestamp_to_string",
                &[timestamp("2009-02-13T23:31:30Z")]
            )),
            "2009-02-13T23:31:30Z"
        );
        assert_eq!(
            text(call(
                &env,
                "string",
                "timestamp_to_string",
                &[timestamp("9999-12-31T23:59:59.999999999Z")]
            )),
            "9999-12-31T23:59:59.999999999Z"
        );
        assert_eq!(
            text(call(
                &env,
                "string",
                "duration_to_string",
                &[duration("1000000s")]
            )),
            "1000000s"
        );
        assert_eq!(
            text(call(
                &env,
                "string",
                "duration_to_string",
                &[duration("1h30m")]
            )),
            "5400s"
        );
        assert!(equals(
            call(
                &env,
                "duration",
                "duration_to_duration",
                &[duration("100s")]
            ),
            &duration("100s")
        ));
        let billion = call(
            &env,
            "timestamp",
            "int64_to_timestamp",
            &[Value::Int(1_000_000_000)],
        );
        assert!(equals(billion.clone(), &timestamp("2001-09-09T01:46:40Z")));
        let billion = billion.unwrap_or(Value::Null);
        assert!(equals(
            call(
                &env,
                "timestamp",
                "timestamp_to_timestamp",
                std::slice::from_ref(&billion)
            ),
            &billion
        ));
        assert!(equals(
            call(
                &env,
                "timestamp",
                "string_to_timestamp",
                &[string("2009-02-13T23:31:30+01:00")]
            ),
            &timestamp("2009-02-13T22:31:30Z")
        ));
        assert!(equals(
            call(&env, "duration", "string_to_duration", &[string("1h2m3s")]),
            &duration("3723s")
        ));
        assert_eq!(
            int(call(&env, "int", "duration_to_int64", &[duration("1s")])),
            1_000_000_000
        );
        assert_eq!(
            int(call(&env, "int", "duration_to_int64", &[duration("-1.5s")])),
            -1_500_000_000
        );
        assert!(equals(
            call(&env, "timestamp", "int64_to_timestamp", &[Value::Int(1)]),
            &timestamp("1970-01-01T00:00:01Z")
        ));
    }

    #[test]
    fn conversion_errors() {
        let env = env();
        let error =
            |result: Result<Value<'_>, EvalError>| result.expect_err("an error").to_string();
        assert_eq!(
            error(call(
                &env,
                "duration",
                "string_to_duration",
                &[string("1d")]
            )),
            "type conversion error from 'string' to 'google.protobuf.Duration'"
        );
        assert_eq!(
            error(call(
                &env,
                "timestamp",
                "string_to_timestamp",
                &[string("2009-02-30T00:00:00Z")]
            )),
            "type conversion error from 'string' to 'google.protobuf.Timestamp'"
        );
        // cel-spec's timestamp_range and duration_range: cel-go's own messages.
        assert_eq!(
            error(call(
                &env,
                "timestamp",
                "string_to_timestamp",
                &[string("0000-01-01T00:00:00Z")]
            )),
            "timestamp overflow"
        );
        assert_eq!(
            error(call(
                &env,
                "timestamp",
                "string_to_timestamp",
                &[string("10000-01-01T00:00:00Z")]
            )),
            "type conversion error from 'string' to 'google.protobuf.Timestamp'"
        );
        assert_eq!(
            error(call(
                &env,
                "duration",
                "string_to_duration",
                &[string("320000000000s")]
            )),
            "type conversion error from 'string' to 'google.protobuf.Duration'"
        );
        assert_eq!(
            error(call(
                &env,
                "timestamp",
                "int64_to_timestamp",
                &[Value::Int(253_402_300_800)]
            )),
            "timestamp overflow"
        );
        // Declared by cel-go v0.26 but always failing there.
        assert_eq!(
            error(call(
                &env,
                "duration",
                "int64_to_duration",
                &[Value::Int(1)]
            )),
            "type conversion error from 'int' to 'google.protobuf.Duration'"
        );
        // A wrong call is refused, not a panic.
        assert!(matches!(
            call(&env, "duration", "string_to_duration", &[Value::Int(1)]),
            Err(EvalError::NoSuchOverload(_))
        ));
        assert!(matches!(
            call(
                &env,
                "getHours",
                "timestamp_to_hours_with_tz",
                &[timestamp("2009-02-13T23:31:30Z"), Value::Int(1)]
            ),
            Err(EvalError::NoSuchOverload(_))
        ));
        assert!(matches!(
            call(&env, "_+_", "add_duration_duration", &[duration("1s")]),
            Err(EvalError::NoSuchOverload(_))
        ));
    }

    #[test]
    fn arithmetic() {
        let env = env();
        // cel-spec's timestamp_arithmetic.
        let sum = call(
            &env,
            "_+_",
            "add_timestamp_duration",
            &[timestamp("2009-02-13T23:00:00Z"), duration("240s")],
        );
        assert!(equals(sum, &timestamp("2009-02-13T23:04:00Z")));
        let sum = call(
            &env,
            "_+_",
            "add_duration_timestamp",
            &[duration("120s"), timestamp("2009-02-13T23:01:00Z")],
        );
        assert!(equals(sum, &timestamp("2009-02-13T23:03:00Z")));
        let sum = call(
            &env,
            "_+_",
            "add_duration_duration",
            &[duration("600s"), duration("50s")],
        );
        assert!(equals(sum, &duration("650s")));
        let difference = call(
            &env,
            "_-_",
            "subtract_timestamp_duration",
            &[timestamp("2009-02-13T23:10:00Z"), duration("600s")],
        );
        assert!(equals(difference, &timestamp("2009-02-13T23:00:00Z")));
        let difference = call(
            &env,
            "_-_",
            "subtract_timestamp_timestamp",
            &[
                timestamp("2009-02-13T23:31:00Z"),
                timestamp("2009-02-13T23:29:00Z"),
            ],
        );
        assert!(equals(difference, &duration("120s")));
        let difference = call(
            &env,
            "_-_",
            "subtract_duration_duration",
            &[duration("900s"), duration("42s")],
        );
        assert!(equals(difference, &duration("858s")));
        // The timestamp's own offset survives arithmetic, in either order.
        let shifted = call(
            &env,
            "_+_",
            "add_duration_timestamp",
            &[duration("1h"), timestamp("2009-02-13T23:31:30+05:30")],
        );
        assert_eq!(
            text(call(
                &env,
                "string",
                "timestamp_to_string",
                &[shifted.unwrap_or(Value::Null)]
            )),
            "2009-02-14T00:31:30+05:30"
        );

        let error =
            |result: Result<Value<'_>, EvalError>| result.expect_err("an error").to_string();
        // cel-spec's timestamp_range and duration_range.
        assert_eq!(
            error(call(
                &env,
                "_+_",
                "add_timestamp_duration",
                &[timestamp("9999-12-31T23:59:59.999999999Z"), duration("1ns")]
            )),
            "timestamp overflow"
        );
        assert_eq!(
            error(call(
                &env,
                "_-_",
                "subtract_timestamp_duration",
                &[timestamp("0001-01-01T00:00:00Z"), duration("1s")]
            )),
            "timestamp overflow"
        );
        assert_eq!(
            error(call(
                &env,
                "_-_",
                "subtract_timestamp_timestamp",
                &[
                    timestamp("9999-12-31T23:59:59Z"),
                    timestamp("0001-01-01T00:00:00Z")
                ]
            )),
            "integer overflow"
        );
        assert_eq!(
            error(call(
                &env,
                "_+_",
                "add_duration_duration",
                &[duration("2562047h"), duration("1h")]
            )),
            "integer overflow"
        );
        assert_eq!(
            error(call(
                &env,
                "_-_",
                "subtract_duration_duration",
                &[duration("-2562047h"), duration("1h")]
            )),
            "integer overflow"
        );
    }

    #[test]
    fn timestamp_getters() {
        let env = env();
        let at = timestamp("2009-02-13T23:31:30Z");
        let get =
            |function: &str, id: &str, args: &[Value<'static>]| int(call(&env, function, id, args));
        // cel-spec's timestamp_selectors.
        assert_eq!(
            get(
                "getDate",
                "timestamp_to_day_of_month_1_based",
                std::slice::from_ref(&at)
            ),
            13
        );
        assert_eq!(
            get(
                "getDayOfMonth",
                "timestamp_to_day_of_month",
                std::slice::from_ref(&at)
            ),
            12
        );
        assert_eq!(
            get(
                "getDayOfWeek",
                "timestamp_to_day_of_week",
                std::slice::from_ref(&at)
            ),
            5
        );
        assert_eq!(
            get(
                "getDayOfYear",
                "timestamp_to_day_of_year",
                std::slice::from_ref(&at)
            ),
            43
        );
        assert_eq!(
            get(
                "getFullYear",
                "timestamp_to_year",
                std::slice::from_ref(&at)
            ),
            2009
        );
        assert_eq!(
            get("getHours", "timestamp_to_hours", std::slice::from_ref(&at)),
            23
        );
        assert_eq!(
            get(
                "getMinutes",
                "timestamp_to_minutes",
                std::slice::from_ref(&at)
            ),
            31
        );
        assert_eq!(
            get("getMonth", "timestamp_to_month", std::slice::from_ref(&at)),
            1
        );
        assert_eq!(
            get(
                "getSeconds",
                "timestamp_to_seconds",
                std::slice::from_ref(&at)
            ),
            30
        );
        let precise = timestamp("2009-02-13T23:31:20.123456789Z");
        assert_eq!(
            get("getMilliseconds", "timestamp_to_milliseconds", &[precise]),
            123
        );

        // cel-spec's timestamp_selectors_tz.
        let with = |zone: &str| [at.clone(), string(zone)];
        assert_eq!(
            get(
                "getDate",
                "timestamp_to_day_of_month_1_based_with_tz",
                &with("Australia/Sydney")
            ),
            14
        );
        assert_eq!(
            get(
                "getDayOfMonth",
                "timestamp_to_day_of_month_with_tz",
                &with("US/Central")
            ),
            12
        );
        assert_eq!(
            get(
                "getDayOfMonth",
                "timestamp_to_day_of_month_with_tz",
                &with("+11:00")
            ),
            13
        );
        let early = timestamp("2009-02-13T02:00:00Z");
        assert_eq!(
            get(
                "getDayOfMonth",
                "timestamp_to_day_of_month_with_tz",
                &[early.clone(), string("-02:30")]
            ),
            11
        );
        assert_eq!(
            get(
                "getDayOfMonth",
                "timestamp_to_day_of_month_with_tz",
                &[early, string("America/St_Johns")]
            ),
            11
        );
        assert_eq!(
            get(
                "getDayOfWeek",
                "timestamp_to_day_of_week_with_tz",
                &with("UTC")
            ),
            5
        );
        assert_eq!(
            get(
                "getDayOfYear",
                "timestamp_to_day_of_year_with_tz",
                &with("US/Central")
            ),
            43
        );
        assert_eq!(
            get("getFullYear", "timestamp_to_year_with_tz", &with("-09:30")),
            2009
        );
        assert_eq!(
            get("getHours", "timestamp_to_hours_with_tz", &with("02:00")),
            1
        );
        assert_eq!(
            get(
                "getMinutes",
                "timestamp_to_minutes_with_tz",
                &with("Asia/Kathmandu")
            ),
            16
        );
        assert_eq!(
            get("getMonth", "timestamp_to_month_with_tz", &with("UTC")),
            1
        );
        assert_eq!(
            get("getSeconds", "timestamp_to_seconds_tz", &with("-00:00")),
            30
        );
        let precise = timestamp("2023-07-14T10:30:45.123Z");
        assert_eq!(
            get(
                "getMilliseconds",
                "timestamp_to_milliseconds_with_tz",
                &[precise.clone(), string("America/Los_Angeles")]
            ),
            123
        );
        assert_eq!(
            get(
                "getHours",
                "timestamp_to_hours_with_tz",
                &[precise, string("America/Los_Angeles")]
            ),
            3
        );

        // cel-go's documented examples.
        let year_end = timestamp("2023-01-01T05:30:00Z");
        assert_eq!(
            get(
                "getFullYear",
                "timestamp_to_year_with_tz",
                &[year_end.clone(), string("-08:00")]
            ),
            2022
        );
        assert_eq!(
            get(
                "getMonth",
                "timestamp_to_month_with_tz",
                &[year_end, string("America/Los_Angeles")]
            ),
            11
        );
        assert_eq!(
            get(
                "getDayOfYear",
                "timestamp_to_day_of_year",
                &[timestamp("2023-01-02T00:00:00Z")]
            ),
            1
        );

        // The getters without a zone read UTC, whatever offset the timestamp was written with.
        assert_eq!(
            get(
                "getHours",
                "timestamp_to_hours",
                &[timestamp("2009-02-14T00:31:30+01:00")]
            ),
            23
        );
        assert_eq!(
            get(
                "getDate",
                "timestamp_to_day_of_month_1_based",
                &[timestamp("2009-02-14T00:31:30+01:00")]
            ),
            13
        );

        let error = call(
            &env,
            "getHours",
            "timestamp_to_hours_with_tz",
            &with("Mars/Olympus_Mons"),
        );
        assert_eq!(
            error.expect_err("an unknown zone").to_string(),
            "unknown time zone Mars/Olympus_Mons"
        );
        let error = call(
            &env,
            "getHours",
            "timestamp_to_hours_with_tz",
            &with("+5:3O"),
        );
        assert_eq!(
            error.expect_err("a bad offset").to_string(),
            r#"strconv.Atoi: parsing "3O": invalid syntax"#
        );
    }

    #[test]
    fn duration_getters() {
        let env = env();
        let get =
            |function: &str, id: &str, text: &str| int(call(&env, function, id, &[duration(text)]));
        // cel-spec's duration_converters (get_milliseconds as cel-go has it, not as cel-spec expects).
        assert_eq!(get("getHours", "duration_to_hours", "10000s"), 2);
        assert_eq!(get("getMinutes", "duration_to_minutes", "3730s"), 62);
        assert_eq!(get("getSeconds", "duration_to_seconds", "3730s"), 3730);
        assert_eq!(
            get(
                "getMilliseconds",
                "duration_to_milliseconds",
                "123.321456789s"
            ),
            123_321
        );
        assert_eq!(get("getHours", "duration_to_hours", "3723s"), 1);
        assert_eq!(get("getMinutes", "duration_to_minutes", "3723s"), 62);
        assert_eq!(get("getSeconds", "duration_to_seconds", "3723.456s"), 3723);
        assert_eq!(
            get("getMilliseconds", "duration_to_milliseconds", "-1.5s"),
            -1500
        );
    }
}
