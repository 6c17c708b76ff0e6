"""The kubelet device plugin API (v1beta1); its fake-node plugin is gputopo_probe.fake.deviceplugin."""
