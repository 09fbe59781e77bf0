"""gRPC adapters: proto in, domain call, proto out. Auth and error mapping live in `guard`."""
