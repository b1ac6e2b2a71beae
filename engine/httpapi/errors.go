package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/httpapi/metrics"
)

// apiError is a refusal or failure on its way to the client: the status,
// a stable machine-readable code, a message for people, and the retry hint
// of a 429 or 503.
type apiError struct {
	status     int
	code       string
	msg        string
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// Codes of errors decided by the handler itself; the engine's reasons keep
// their actors.Reason names (rate_limited, queue_full, ...).
const (
	codeBadRequest   = "bad_request"
	codeUnauthorized = "unauthorized"
	codeForbidden    = "forbidden"
	codeNotFound     = "not_found"
	codeUnknownModel = "unknown_model"
	codeTooLarge     = "body_too_large"
	codeTimeout      = "request_timeout"
	codeMethod       = "method_not_allowed"
	codeMediaType    = "unsupported_media_type"
	codeOverloaded   = "overloaded"
	codeDraining     = "draining"
	codeDeadline     = "deadline"
	codeCancelled    = "cancelled"
	codeInternal     = "internal"
)

// statusClientClosed is nginx's "client closed request": it goes nowhere
// (the client is gone) but keeps such requests apart in the metrics.
const statusClientClosed = 499

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf(format, args...)}
}

// replyError maps an engine reply to its error, nil for a completed one.
// This is the table in the package doc.
func (h *Handler) replyError(rep actors.Reply) *apiError {
	if rep.Outcome == actors.Completed {
		return nil
	}
	msg := rep.Err
	if msg == "" {
		msg = rep.Outcome.String()
		if rep.Reason != actors.ReasonNone {
			msg += ": " + rep.Reason.String()
		}
	}
	e := &apiError{code: rep.Reason.String(), msg: msg}
	switch rep.Outcome {
	case actors.Expired:
		e.status, e.code = http.StatusGatewayTimeout, codeDeadline
		return e
	case actors.Failed:
		e.status = http.StatusInternalServerError
		if rep.Reason == actors.ReasonNone {
			e.code = "backend"
		}
		return e
	case actors.Cancelled:
		// Only a caller that went away cancels; if anyone still reads
		// this, the service withdrew the request (shutdown): try again.
		e.status, e.code, e.retryAfter = http.StatusServiceUnavailable, codeCancelled, h.cfg.RetryAfterDefault
		return e
	}
	switch rep.Reason {
	case actors.ReasonInvalid:
		e.status = http.StatusBadRequest
	case actors.ReasonUnknownModel:
		e.status = http.StatusNotFound
	case actors.ReasonRateLimited, actors.ReasonQuota:
		e.status = http.StatusTooManyRequests
	case actors.ReasonDeadline:
		e.status, e.code = http.StatusGatewayTimeout, codeDeadline
	default: // queue_full, overloaded, no_device, draining, and anything new
		e.status = http.StatusServiceUnavailable
		if rep.Reason == actors.ReasonNone {
			e.code = codeOverloaded
		}
	}
	if e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		e.retryAfter = rep.RetryAfter
		if e.retryAfter <= 0 {
			e.retryAfter = h.cfg.RetryAfterDefault
		}
	}
	return e
}

// doError maps an error from the front door (Do, Submit). ctx is the context the request came
// with: a deadline of its own that ended is 504; otherwise, when it ended,
// the client is gone.
func (h *Handler) doError(ctx context.Context, err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrInFlightMax):
		return &apiError{status: http.StatusServiceUnavailable, code: codeOverloaded, msg: err.Error(), retryAfter: h.cfg.RetryAfterDefault}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, code: codeDraining, msg: err.Error(), retryAfter: h.cfg.RetryAfterDefault}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, code: codeDeadline, msg: "no reply from the engine in time"}
	case ctx.Err() != nil:
		return &apiError{status: statusClientClosed, code: codeCancelled, msg: "client went away"}
	}
	return &apiError{status: http.StatusInternalServerError, code: codeInternal, msg: err.Error()}
}

// outcomeOf names, for the requests counter, how a Do call ended.
func outcomeOf(rep actors.Reply, err *apiError) string {
	if err == nil || rep.Outcome != 0 {
		return rep.Outcome.String()
	}
	switch err.status {
	case statusClientClosed:
		return actors.Cancelled.String()
	case http.StatusGatewayTimeout:
		return actors.Expired.String()
	case http.StatusServiceUnavailable:
		return actors.Rejected.String()
	}
	return actors.Failed.String()
}

// reasonNone is the reason label of a request that was not refused.
const reasonNone = metrics.ReasonNone

// reasonOf names the reason label for the requests counter.
func reasonOf(rep actors.Reply, err *apiError) string {
	if rep.Outcome != 0 {
		if rep.Reason == actors.ReasonNone {
			return reasonNone
		}
		return rep.Reason.String()
	}
	if err == nil {
		return reasonNone
	}
	return err.code
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: Retry-After
// takes whole seconds, and 0 would invite an immediate retry.
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// ceilMillis is d in whole milliseconds, rounded up, at least 1.
func ceilMillis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// errorBody is the v1 error object.
type errorBody struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
}

func (e *apiError) body() *errorBody {
	b := &errorBody{Code: e.code, Message: e.msg}
	if e.retryAfter > 0 {
		b.RetryAfterMs = ceilMillis(e.retryAfter)
	}
	return b
}

// setRetryAfter sets the Retry-After header of a 429 or 503.
func (e *apiError) setRetryAfter(w http.ResponseWriter) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(e.retryAfter), 10))
	}
}
