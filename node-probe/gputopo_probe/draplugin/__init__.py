"""The kubelet's DRA plugin API (dra/v1) and plugin registration API (pluginregistration/v1).

``dra.proto`` and ``pluginregistration.proto`` are copied unchanged from k8s.io/kubelet v0.37.2
(``pkg/apis/dra/v1/api.proto``, ``pkg/apis/pluginregistration/v1/api.proto``); the ``*_pb2`` modules are
generated from them with ``python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. dra.proto
pluginregistration.proto``. The fake-node plugin that serves them is gputopo_probe.fake.draplugin.
"""
