"""The csi.v1 services of csi.proto as grpcio method tables (server handlers and client stubs),
over the message classes generated at build time into csi_pb2.py."""

import grpc

try:
    from . import csi_pb2 as pb
except ImportError as e:  # pragma: no cover - a package built without grpcio-tools
    raise ImportError("s3flash.csi: csi_pb2 (generated from csi.proto at build time) is missing: "
                      "build the package with grpcio-tools installed") from e

# service -> {method: (request class, response class)}
SERVICES = {
    "Identity": {
        "GetPluginInfo": (pb.GetPluginInfoRequest, pb.GetPluginInfoResponse),
        "GetPluginCapabilities": (pb.GetPluginCapabilitiesRequest,
                                  pb.GetPluginCapabilitiesResponse),
        "Probe": (pb.ProbeRequest, pb.ProbeResponse),
    },
    "Node": {
        "NodePublishVolume": (pb.NodePublishVolumeRequest, pb.NodePublishVolumeResponse),
        "NodeUnpublishVolume": (pb.NodeUnpublishVolumeRequest, pb.NodeUnpublishVolumeResponse),
        "NodeGetVolumeStats": (pb.NodeGetVolumeStatsRequest, pb.NodeGetVolumeStatsResponse),
        "NodeGetCapabilities": (pb.NodeGetCapabilitiesRequest, pb.NodeGetCapabilitiesResponse),
        "NodeGetInfo": (pb.NodeGetInfoRequest, pb.NodeGetInfoResponse),
    },
    "Controller": {
        "CreateVolume": (pb.CreateVolumeRequest, pb.CreateVolumeResponse),
        "DeleteVolume": (pb.DeleteVolumeRequest, pb.DeleteVolumeResponse),
        "ValidateVolumeCapabilities": (pb.ValidateVolumeCapabilitiesRequest,
                                       pb.ValidateVolumeCapabilitiesResponse),
        "ControllerGetCapabilities": (pb.ControllerGetCapabilitiesRequest,
                                      pb.ControllerGetCapabilitiesResponse),
    },
}


def add_service(server, service, impl):
    """Serve csi.v1.<service> from impl, whose methods are named as the RPCs and take
    (request, context). RPCs impl lacks answer UNIMPLEMENTED."""
    handlers = {}
    for method, (req, resp) in SERVICES[service].items():
        fn = getattr(impl, method, None)
        if fn is None:
            continue
        handlers[method] = grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "csi.v1." + service, handlers),))


class Stub:
    """A client of one csi.v1 service: Stub(channel, "Node").NodePublishVolume(request)."""

    def __init__(self, channel, service):
        for method, (req, resp) in SERVICES[service].items():
            setattr(self, method, channel.unary_unary(
                "/csi.v1.%s/%s" % (service, method), request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString))
