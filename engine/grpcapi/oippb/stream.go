package oippb

import (
	"context"

	"google.golang.org/grpc"
)

// Triton's streaming RPC, which the published service does not declare
// (see the package doc): its method, and the client and server streams
// protoc-gen-go-grpc would have generated for it.

// GRPCInferenceService_ModelStreamInfer_FullMethodName is Triton's method
// path of ModelStreamInfer, on the published service's name.
const GRPCInferenceService_ModelStreamInfer_FullMethodName = "/inference.GRPCInferenceService/ModelStreamInfer"

// ModelStreamInferStreamDesc describes the bidirectional stream.
var ModelStreamInferStreamDesc = grpc.StreamDesc{
	StreamName:    "ModelStreamInfer",
	ServerStreams: true,
	ClientStreams: true,
}

// ModelStreamInferClient is the client's side of one stream.
type ModelStreamInferClient = grpc.BidiStreamingClient[ModelInferRequest, ModelStreamInferResponse]

// ModelStreamInferServer is the server's side of one stream.
type ModelStreamInferServer = grpc.BidiStreamingServer[ModelInferRequest, ModelStreamInferResponse]

// ModelStreamInfer opens a stream on cc.
func ModelStreamInfer(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (ModelStreamInferClient, error) {
	s, err := cc.NewStream(ctx, &ModelStreamInferStreamDesc, GRPCInferenceService_ModelStreamInfer_FullMethodName, opts...)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[ModelInferRequest, ModelStreamInferResponse]{ClientStream: s}, nil
}

// StreamingServiceDesc is the published service, GRPCInferenceService,
// with Triton's ModelStreamInfer added, served by stream: one service
// name, as Triton's clients expect, whose unary methods are the generated
// ones.
func StreamingServiceDesc(stream func(ModelStreamInferServer) error) grpc.ServiceDesc {
	d := GRPCInferenceService_ServiceDesc
	d.Streams = append(append([]grpc.StreamDesc(nil), d.Streams...), grpc.StreamDesc{
		StreamName: ModelStreamInferStreamDesc.StreamName,
		Handler: func(_ any, s grpc.ServerStream) error {
			return stream(&grpc.GenericServerStream[ModelInferRequest, ModelStreamInferResponse]{ServerStream: s})
		},
		ServerStreams: true,
		ClientStreams: true,
	})
	return d
}
