"""Live Android collection through adb (`worldline collect android`)."""
