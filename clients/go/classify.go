package budgetagent

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultClassify tells what kind of failure err is, for R-retry:
//
//   - a context deadline, or gRPC DEADLINE_EXCEEDED: FailureDeadline;
//   - gRPC UNAVAILABLE: FailureUnavailable;
//   - codes an application answers with (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//     FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE): FailureBusiness;
//   - anything else (cancelled, internal, auth, unknown, a plain error): FailureOther.
//
// Neither of the last two is ever retried. Wrapped errors are unwrapped. A call that
// failed under Call classifies like its cause, so a caller's own caller retries it
// correctly; ErrBudgetExhausted is a deadline.
//
// A service with its own business errors sets Options.Classify to a function that
// recognises them and hands everything else to DefaultClassify.
func DefaultClassify(err error) Failure {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBudgetExhausted) {
		return FailureDeadline
	}
	if errors.Is(err, context.Canceled) {
		return FailureOther
	}
	var withStatus interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &withStatus) {
		return FailureOther
	}
	switch withStatus.GRPCStatus().Code() {
	case codes.DeadlineExceeded:
		return FailureDeadline
	case codes.Unavailable:
		return FailureUnavailable
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange:
		return FailureBusiness
	default:
		return FailureOther
	}
}

// ErrBudgetExhausted is returned by Call when no time was left to start even one attempt
// (the inherited deadline had passed). It is a gRPC DEADLINE_EXCEEDED for status.Code, so
// the interceptor's callers see the code they expect.
var ErrBudgetExhausted error = budgetExhausted{}

type budgetExhausted struct{}

func (budgetExhausted) Error() string {
	return "budgetagent: no time left in the budget to start the call"
}

func (e budgetExhausted) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.Error())
}
