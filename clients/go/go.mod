module github.com/budgetd/budgetd/clients/go

go 1.19

require (
	github.com/codahale/hdrhistogram v0.0.0-20161010025455-3a0bb77429bd
	github.com/prometheus/client_golang v1.14.0
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
