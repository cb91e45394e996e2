from corpus_common import serve
from corpus_web.server import server

serve(server)
