"""trio I/O around the sans-IO core: transports (TCP, TLS, Unix, WebSocket) and the async MQTT client.

Imported only by commands that need it (trio alone costs about 135 ms to import).
"""
