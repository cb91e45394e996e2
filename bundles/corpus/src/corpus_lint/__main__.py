from corpus_common import serve
from corpus_lint.server import server

serve(server)
