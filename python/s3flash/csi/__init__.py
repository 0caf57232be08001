"""s3flash's Kubernetes CSI driver (`s3flash-csi`): buckets as volumes of pods, served by
`s3flash mount` daemons (docs/KUBERNETES.md).

Processes (`s3flash-csi node|mounter|controller`, `main.py`):
  node        the CSI Identity and Node services on kubelet's unix socket (`node.py`); mounts
              each volume's FUSE connection itself and hands the /dev/fuse descriptor to
  mounter     which runs one `s3flash mount BUCKET /dev/fd/N` daemon per mount (`mounter.py`)
  controller  Identity and Controller (CreateVolume/DeleteVolume: a prefix per claim)

The messages are generated from csi.proto at build time (`csi_pb2.py`, src/python/meson.build);
`proto.py` maps the services' methods onto them for grpcio.
"""

PLUGIN_NAME = "csi.s3flash.io"
