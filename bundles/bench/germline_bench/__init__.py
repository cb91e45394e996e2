"""germline's benchmark release (`germline bench`, docs/performance.md)."""
