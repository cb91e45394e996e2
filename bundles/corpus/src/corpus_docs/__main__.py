from corpus_common import serve
from corpus_docs.server import server

serve(server)
