"""`cugraph-accel serve`: an OpenAI-compatible HTTP server with continuous batching over the captured graphs.

protocol.py reads requests and writes responses (no I/O); text.py turns tokens into streamed text and finds
stop strings; scheduler.py is the engine thread that admits, prefills, decodes and samples; metrics.py counts;
app.py is the FastAPI front; server.py runs it under uvicorn and drains on SIGTERM. The engine it drives
(engine.py, SlotEngine) holds one row of the captured graphs per request.
"""
