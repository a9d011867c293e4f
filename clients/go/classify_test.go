package budgetagent

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGRPCCodesAndContextErrorsClassifyAsTheRustAgentDoes(t *testing.T) {
	want := map[codes.Code]Failure{
		codes.DeadlineExceeded:   FailureDeadline,
		codes.Unavailable:        FailureUnavailable,
		codes.InvalidArgument:    FailureBusiness,
		codes.NotFound:           FailureBusiness,
		codes.AlreadyExists:      FailureBusiness,
		codes.FailedPrecondition: FailureBusiness,
		codes.Aborted:            FailureBusiness,
		codes.OutOfRange:         FailureBusiness,
		codes.Canceled:           FailureOther,
		codes.Unknown:            FailureOther,
		codes.PermissionDenied:   FailureOther,
		codes.ResourceExhausted:  FailureOther,
		codes.Unimplemented:      FailureOther,
		codes.Internal:           FailureOther,
		codes.DataLoss:           FailureOther,
		codes.Unauthenticated:    FailureOther,
	}
	for code, failure := range want {
		err := status.Error(code, "x")
		if got := DefaultClassify(err); got != failure {
			t.Errorf("%v: %v, want %v", code, got, failure)
		}
		if got := DefaultClassify(fmt.Errorf("calling inventory: %w", err)); got != failure {
			t.Errorf("wrapped %v: %v, want %v", code, got, failure)
		}
	}
	for err, failure := range map[error]Failure{
		context.DeadlineExceeded:                            FailureDeadline,
		fmt.Errorf("reserve: %w", context.DeadlineExceeded): FailureDeadline,
		context.Canceled:                                    FailureOther,
		errors.New("boom"):                                  FailureOther,
		// A nested call that ran out of budget classifies like its cause.
		ErrBudgetExhausted: FailureDeadline,
	} {
		if got := DefaultClassify(err); got != failure {
			t.Errorf("%v: %v, want %v", err, got, failure)
		}
	}
	if s := status.Convert(ErrBudgetExhausted); s.Code() != codes.DeadlineExceeded {
		t.Errorf("ErrBudgetExhausted is %v to gRPC", s.Code())
	}
}
