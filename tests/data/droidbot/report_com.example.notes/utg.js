var utg = 
{
  "app_sha256": "abababababababababababababababababababababababababababababababab",
  "app_package": "com.example.notes",
  "app_main_activity": "com.example.notes.MainActivity",
  "app_num_total_activities": 2,
  "device_serial": "emulator-5554",
  "device_model_number": "sdk_gphone64_x86_64",
  "device_sdk_version": 33,
  "test_date": "2024-03-01 10:14:58",
  "time_spent": 14.2,
  "num_transitions": 5,
  "num_effective_events": 4,
  "num_reached_activities": 1,
  "num_input_events": 5,
  "num_nodes": 2,
  "num_edges": 2,
  "nodes": [
    {
      "id": "9f1c1e5b0a6d4a1b8e2f3c4d5e6f7a8b",
      "shape": "image"
    },
    {
      "id": "1b2c3d4e5f60718293a4b5c6d7e8f901",
      "shape": "image"
    }
  ],
  "edges": [
    {
      "from": "9f1c1e5b0a6d4a1b8e2f3c4d5e6f7a8b",
      "to": "1b2c3d4e5f60718293a4b5c6d7e8f901",
      "id": "9f1c1e5b0a6d4a1b8e2f3c4d5e6f7a8b-->1b2c3d4e5f60718293a4b5c6d7e8f901"
    }
  ]
}