from corpus_common import serve
from corpus_sql.server import server

serve(server)
